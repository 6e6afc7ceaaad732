"""Faults during rollouts: a harness that hangs past its timeout, an env server that dies mid-run,
an engine that restarts. The rollouts go on; the faulty episodes are labelled in the store and
left out of training; dead servers come back on the same port (the engine with the run's
newest weights)."""

from __future__ import annotations

import asyncio
import sys
import time

import httpx
import pytest

from roost.agents.protocol import AgentOutcome, EpisodeContext
from roost.envs.protocol import EnvInfo, Observation, Reset, Step, Task, TextAction
from roost.outcome import EpisodeStatus
from roost.rollout.gateway.control.client import GatewayClient
from roost.trainer.rl.batches import collect_batch
from roost.trainer.rl.rollout_workers import GroupSpec, RolloutWorker
from roost.trainer.rl.services import ServiceActor, SupervisedServer

pytestmark = pytest.mark.slow

THIS = "roost.tests.trainer.test_rl_faults"  # the env servers and the runner load from here
TOOLS = [{"type": "function", "function": {"name": "act", "parameters": {"type": "object", "properties": {}}}}]


class OneStepEnv:
    """Done with reward 1 after one `win`; served by the test's env servers (entry point
    `roost.tests.trainer.test_rl_faults:make_factory`: the server's workers import this module)."""

    @property
    def info(self) -> EnvInfo:
        return EnvInfo("one-step", "0", TOOLS, ("train",))

    async def tasks(self, split: str) -> list[Task]:
        return [Task("t0", split)]

    async def reset(self, *, task_id=None, seed=None, split=None, options=None) -> Reset:
        return Reset(task_id or "t0", Observation("say win"), TOOLS, {})

    async def step(self, action) -> Step:
        return Step(Observation("won"), 1.0, True, False, {})

    async def close(self) -> None:
        pass


def make_factory():
    return OneStepEnv


class SlowAgent:
    """Waits `delay` seconds, then wins; with a huge delay it hangs."""

    name, needs_model, reset_options = "slow", False, {}

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    async def run(self, ctx: EpisodeContext) -> AgentOutcome:
        await asyncio.sleep(self.delay)
        await ctx.step(TextAction("win"))
        return AgentOutcome(turns=1)


def env_server(tmp_path) -> SupervisedServer:
    command = [sys.executable, "-m", "roost.envs.serve", f"{THIS}:make_factory", "--port", "0", "--workers", "1"]
    env = {"PYTHONPATH": ":".join(p for p in sys.path if p)}
    return SupervisedServer("env", command, "127.0.0.1", 0, log_dir=tmp_path, env=env, startup_timeout_s=60)


def agent_config(delay: float, timeout_s: float) -> dict:
    return {"harness": f"{THIS}:SlowAgent", "args": {"delay": delay}, "max_turns": 3, "timeout_s": timeout_s}


@pytest.fixture
def gateway(scripted_engine_url, tmp_path):
    from roost.rollout.gateway.config import GatewayConfig
    from roost.rollout.gateway.launch import GatewayThread

    store = tmp_path / "store.sqlite"
    server = GatewayThread(GatewayConfig(engine_url=scripted_engine_url, model="tiny", store_path=store, port=0))
    with server as url:
        yield url, store, server.admin_key


async def test_a_hanging_harness_is_cut_off_labelled_and_left_out(gateway, tmp_path):
    import ray.cloudpickle  # here: the env server's workers import this module

    url, _, admin_key = gateway
    server = env_server(tmp_path)
    server.start()
    try:
        task = Task("t0", "train")
        fast = RolloutWorker(server.url, url, agent_config(0.0, 5.0), concurrency=4, admin_key=admin_key)
        hung = RolloutWorker(server.url, url, agent_config(3600.0, 1.0), concurrency=4, admin_key=admin_key)
        [ok] = await fast.play([GroupSpec("g0", task, 2)])
        [cut] = await hung.play([GroupSpec("g1", task, 2)])
    finally:
        server.stop()
    assert [r.status for r in ok.results] == [EpisodeStatus.OK] * 2 and all(r.success for r in ok.results)
    assert [r.status for r in cut.results] == [EpisodeStatus.TIMEOUT] * 2
    assert cut.results[0].error.startswith("HarnessTimeout")
    # an actor's outcome reaches the driver as Ray pickles it: still typed, status and all
    back = ray.cloudpickle.loads(ray.cloudpickle.dumps(cut))
    assert back == cut and back.results[0].status is EpisodeStatus.TIMEOUT
    async with GatewayClient(url, admin_key=admin_key) as gw:
        batch = await collect_batch(gw, ["g1/t0"], current_version=0, max_staleness=None)
    assert batch.counts == {"timeout": 2, "samples": 0}


async def test_an_env_server_that_dies_mid_run_is_restarted_and_its_episodes_labelled(gateway, tmp_path):
    url, _, admin_key = gateway
    server = env_server(tmp_path)
    server.start()
    try:
        worker = RolloutWorker(server.url, url, agent_config(1.5, 30.0), concurrency=4, admin_key=admin_key)
        playing = asyncio.create_task(worker.play([GroupSpec("g2", Task("t0", "train"), 2)]))
        await asyncio.sleep(0.8)  # both episodes started, neither finished
        server.kill()
        [outcome] = await playing
        deadline = time.monotonic() + 60
        while not server.healthy() and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        [after] = await worker.play([GroupSpec("g3", Task("t0", "train"), 1)])
    finally:
        server.stop()
    assert [r.status for r in outcome.results] == [EpisodeStatus.INFRA_ERROR] * 2
    assert server.restarts == 1 and after.results[0].status is EpisodeStatus.OK
    async with GatewayClient(url, admin_key=admin_key) as gw:
        batch = await collect_batch(gw, ["g2/t0"], current_version=0, max_staleness=None)
    assert batch.counts["infra_error"] == 2


async def test_a_restarted_engine_serves_the_runs_newest_weights_at_the_same_version(tiny_model_path, tmp_path):
    from roost.rollout.engine.server_config import EngineServerConfig
    from roost.rollout.engine_api.sglang_client import SGLangClient
    from roost.trainer.rl.services import server_command

    key = "rek-the-runs-engine-key"  # the restarted engine takes it too, and the reload sends it
    actor = ServiceActor(
        "engine",
        server_command("engine"),
        "127.0.0.1",
        0,
        str(tmp_path),
        {"ROOST_ENGINE_KEY": key},
        EngineServerConfig(model="tiny", port=0),  # as the trainer starts it: the config, read again on restart
    )
    url = actor.start()
    try:
        async with SGLangClient(url, api_key=key) as client:
            await client.update_weights_from_disk(str(tiny_model_path), weight_version="7")
        actor.loaded(str(tiny_model_path), "7")
        dying = actor.server.process
        actor.kill()
        await asyncio.to_thread(dying.wait, 30)
        # serving again means relaunched and the run's weights reloaded (the loop waits for this)
        assert await asyncio.to_thread(actor.wait_serving, 120)
        async with httpx.AsyncClient(timeout=5) as http:
            version = (await http.get(f"{url}/get_model_info")).json().get("weight_version")
        assert version == "7" and actor.restarts() == 1
    finally:
        actor.stop()


async def test_a_restarted_engine_of_a_lora_run_serves_its_newest_adapter_at_the_same_version(
    tiny_model_path, tmp_path
):
    from roost.rollout.engine.model_spec import ModelSpec
    from roost.rollout.engine.server_config import EngineServerConfig
    from roost.rollout.engine_api.sglang_client import SGLangClient
    from roost.rollout.lora import LoraSpec, save_adapter
    from roost.trainer.megatron.lora import fresh_weights
    from roost.trainer.rl.services import server_command

    spec = LoraSpec(rank=2, alpha=4.0, targets=("q_proj", "v_proj"))
    folder = save_adapter(
        tmp_path / "adapter-v1",
        spec,
        fresh_weights(spec, ModelSpec.from_folder(tiny_model_path)),
        base_model=str(tiny_model_path),
    )
    key = "rek-the-runs-engine-key"
    actor = ServiceActor(
        "engine",
        server_command("engine"),
        "127.0.0.1",
        0,
        str(tmp_path / "logs"),
        {"ROOST_ENGINE_KEY": key},
        EngineServerConfig(model="tiny", port=0),
    )
    url = actor.start()
    try:
        async with SGLangClient(url, api_key=key) as client:
            await client.load_lora_adapter("run-lora", str(folder), replace=True)
            await client.update_weight_version("4")
        actor.loaded(str(folder), "4", "run-lora")
        dying = actor.server.process
        actor.kill()
        await asyncio.to_thread(dying.wait, 30)
        assert await asyncio.to_thread(actor.wait_serving, 120)
        async with httpx.AsyncClient(timeout=5) as http:
            version = (await http.get(f"{url}/get_model_info")).json().get("weight_version")
            cards = (await http.get(f"{url}/v1/models")).json()["data"]
        assert version == "4" and actor.restarts() == 1
        assert [(c["id"], c["root"]) for c in cards if c["parent"]] == [("run-lora", str(folder))]
    finally:
        actor.stop()
