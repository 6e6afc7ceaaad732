"""Each default in one place: a recipe section and the runtime config it feeds agree on every
field they share, so a recipe that leaves a field out runs as the runtime would without one."""

from __future__ import annotations

from dataclasses import fields

from roost.agents.runner import RunConfig
from roost.envs.episodes import ManagerConfig
from roost.rollout.engine.server_config import EngineServerConfig
from roost.rollout.gateway.config import GatewayConfig as GatewayServerConfig
from roost.trainer.megatron.train import TrainConfig
from roost.trainer.recipe import (
    AgentConfig,
    EngineConfig,
    EnvServerConfig,
    GatewayConfig,
    RolloutConfig,
    TrainerConfig,
)


def shared(section, config, names):
    return {name: (getattr(section, name), getattr(config, name)) for name in names}


def test_the_trainer_section_and_train_config_agree():
    config = TrainConfig(checkpoint="unused")
    # loss: LossConfig against LossSection, in tests/trainer/test_losses.py
    names = [f.name for f in fields(TrainConfig) if f.name in TrainerConfig.model_fields and f.name != "loss"]
    assert len(names) == 15  # lora, routing_replay, moe_aux_loss_coeff and freeze_vision_tower included
    for name, (section, runtime) in shared(TrainerConfig(), config, names).items():
        assert section == runtime, name
    assert config.attention == "sdpa"


def test_agent_and_rollout_sections_take_the_runners_defaults():
    run = RunConfig()
    assert AgentConfig().max_turns == run.max_turns == 50
    assert AgentConfig().timeout_s == run.timeout_s
    assert RolloutConfig().concurrency == run.concurrency == 8
    assert RolloutConfig().invalid_action_penalty == run.invalid_action_penalty


def test_env_server_and_gateway_sections_take_their_servers_defaults():
    manager = ManagerConfig()
    assert (EnvServerConfig().workers, EnvServerConfig().max_episodes) == (manager.workers, manager.max_episodes)
    assert GatewayConfig().reasoning_policy == GatewayServerConfig().reasoning_policy


def test_the_engine_section_takes_the_engine_servers_defaults():
    section, server = EngineConfig(), EngineServerConfig()
    assert (section.dtype, section.max_running) == (server.dtype, server.max_running) == ("float32", 64)


def test_a_lora_runs_engine_config_serves_its_adapter(tmp_path):
    """vLLM serves adapters only with --enable-lora and up to its rank limit: a LoRA run's engine
    config asks for both; a full-weight run's leaves the defaults."""
    from roost.trainer.recipe import validate_recipe
    from roost.trainer.rl.services import engine_config

    def config(backend: str, lora: dict | None):
        trainer = {"lora": lora} if lora else {}
        recipe = validate_recipe(
            {"name": "r", "env": {"name": "alfworld"}, "engine": {"backend": backend}, "trainer": trainer}
        )
        return engine_config(recipe, "tiny", "127.0.0.1", tmp_path)

    assert config("vllm", {"rank": 128}).enable_lora and config("vllm", {"rank": 128}).max_lora_rank == 128
    assert not config("embedded", {"rank": 8}).enable_lora and config("embedded", {"rank": 8}).max_lora_rank == 64
    assert not config("vllm", None).enable_lora
