"""Weight sync after a LoRA step sends the adapter alone: the engine keeps its base weights, serves
the trainer's new adapter under the run's name at the new weight version, and the trainer's
logprobs of what the engine then samples with it are the engine's. The adapter covers `lm_head` of
the tiny model, which ties its embeddings: roost's engine serves that adapter as PEFT computes it."""

from __future__ import annotations

import httpx
import pytest
import torch
from transformers import AutoTokenizer

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.engine_api.sglang_client import SGLangClient
from roost.rollout.keys import bearer
from roost.rollout.lora import KNOWN_TARGETS, LoraSpec
from roost.rollout.store.samples import Sample
from roost.tests.trainer.test_train_and_sync import PauseSpy, record
from roost.trainer.advantages import AdvantageConfig, EstimatorConfig, compute_advantages
from roost.trainer.sample_sources import group_samples, samples_from_store
from roost.trainer.weight_sync import WeightSyncError, folder_bytes, sync_adapter

NAME = "run-lora"
SPEC = LoraSpec(rank=4, alpha=8.0, targets=tuple(sorted(KNOWN_TARGETS)))  # lm_head too


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    """This module's own engine: it gets adapters and weight versions."""
    process = EngineProcess("tiny")
    with process:
        yield process


@pytest.fixture(scope="module")
def gateway(engine, tiny_model_path, tmp_path_factory):
    from roost.rollout.gateway.config import GatewayConfig
    from roost.rollout.gateway.launch import GatewayThread

    store = tmp_path_factory.mktemp("store") / "trajectories.sqlite"
    config = GatewayConfig(
        engine_url=engine.url, model=str(tiny_model_path), served_model_name="tiny", store_path=store
    )
    server = GatewayThread(config)
    with server as url:
        yield url, store, server.admin_key


async def generate(engine_url: str, prompt: list[int], lora: str | None) -> tuple[list[int], list[float], str]:
    async with SGLangClient(engine_url) as client:
        gen = await client.generate(prompt, {"max_new_tokens": 8, "temperature": 0.0, "ignore_eos": True}, lora=lora)
    return gen.output_ids, gen.output_logprobs, gen.weight_version


async def test_after_a_lora_step_the_engine_gets_the_adapter_and_agrees_with_the_trainer(
    megatron_world, engine, gateway, tiny_model_path, tmp_path
):
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    gateway_url, store, admin_key = gateway
    async with httpx.AsyncClient(timeout=120) as http:
        groups = await record(http, gateway_url, admin_key, rollouts=2)
    samples = list(samples_from_store(store, group_ids=groups))
    policy = MegatronPolicy(TrainConfig(checkpoint=str(tiny_model_path), lora=SPEC, lr=1e-2, token_budget=512))
    config = AdvantageConfig(default=EstimatorConfig("grpo", {"equal_rewards": "zero"}))
    scored, _ = compute_advantages(group_samples(samples), config)
    assert policy.train_step(scored).updated

    folder = policy.save_adapter(tmp_path / "adapter")
    prompt = AutoTokenizer.from_pretrained(tiny_model_path)("The weather today")["input_ids"]
    base = await generate(engine.url, prompt, None)
    result = await sync_adapter(
        engine.url,
        folder,
        NAME,
        weight_version="lora-1",
        engine_key=engine.api_key,
        gateway_url=gateway_url,
        admin_key=admin_key,
    )
    assert result.weight_version == "lora-1"
    assert result.bytes == folder_bytes(folder) < folder_bytes(tiny_model_path) / 2
    async with httpx.AsyncClient() as http:
        cards = (await http.get(f"{engine.url}/v1/models")).json()["data"]
    assert [(c["id"], c["root"]) for c in cards if c["parent"]] == [(NAME, str(folder.resolve()))]

    ids, logprobs, version = await generate(engine.url, prompt, NAME)
    assert version == "lora-1" and logprobs != base[1]
    assert (await generate(engine.url, prompt, None))[1] == base[1]  # the base weights stayed
    probe = Sample.from_turns([(prompt, ids, logprobs)], session_id="probe", group_id="probe")
    assert float((policy.logprobs([probe])[0] - torch.tensor(logprobs)).abs().max()) <= 1e-4

    # a call naming the adapter through the gateway is recorded with it, at the new version, and
    # the trainer recomputes its logprobs
    async with httpx.AsyncClient(timeout=120) as http:
        session = (
            await http.post(f"{gateway_url}/sessions", json={"group_id": "step-1/t"}, headers=bearer(admin_key))
        ).json()
        answer = await http.post(
            f"{session['base_url']}/chat/completions",
            headers=bearer(session["key"]),
            json={"model": NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6},
        )
        assert answer.status_code == 200, answer.text
        await http.post(f"{gateway_url}/sessions/{session['session_id']}/finish", json={}, headers=bearer(admin_key))
    recorded = list(samples_from_store(store, session_ids=[session["session_id"]]))
    assert {(c.adapter, c.weight_version) for s in recorded for c in s.calls} == {(NAME, "lora-1")}
    for sample, lp in zip(recorded, policy.logprobs(recorded)):
        rollout = torch.tensor([sample.rollout_logprobs[i] for i, m in enumerate(sample.loss_mask) if m])
        assert float((lp - rollout).abs().max()) <= 1e-4


async def test_an_adapter_that_does_not_fit_is_refused_and_the_gateway_resumes(engine, tmp_path):
    spy = PauseSpy(engine.url)
    url = await spy.start()
    (tmp_path / "empty").mkdir()
    try:
        with pytest.raises(WeightSyncError, match=f"did not load the adapter .*empty as '{NAME}-bad'"):
            await sync_adapter(
                engine.url,
                tmp_path / "empty",
                f"{NAME}-bad",
                weight_version="bad",
                engine_key=engine.api_key,
                gateway_url=url,
                admin_key="rak-the-admin-key",
            )
    finally:
        await spy.runner.cleanup()
    assert [e[0] for e in spy.events] == ["pause", "resume"]
    async with SGLangClient(engine.url) as client:
        assert (await client.model_info())["weight_version"] != "bad"
        assert f"{NAME}-bad" not in await client.lora_adapters()


async def test_the_weight_version_route_refuses_aborting_and_unknown_fields(engine):
    async with httpx.AsyncClient(headers=bearer(engine.api_key)) as http:
        aborting = await http.post(
            f"{engine.url}/update_weight_version", json={"new_version": "x", "abort_all_requests": True}
        )
        unknown = await http.post(f"{engine.url}/update_weight_version", json={"version": "x"})
        info = (await http.get(f"{engine.url}/get_model_info")).json()
    async with httpx.AsyncClient() as http:
        keyless = await http.post(f"{engine.url}/update_weight_version", json={"new_version": "x"})
    assert aborting.status_code == 400 and "abort_all_requests is not supported" in aborting.text
    assert unknown.status_code == 400 and "new_version" in unknown.text
    assert keyless.status_code == 401
    assert info["weight_version"] != "x"
