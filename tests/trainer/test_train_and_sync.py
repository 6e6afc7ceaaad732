"""End to end: record trajectories through the real gateway into the trajectory store,
train the tiny model a few steps with Megatron on the store's samples, export a Hugging
Face checkpoint, sync it into the engine with the gateway paused around the swap, and
check the engine now serves the trainer's weights at the new version."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest
import torch
from aiohttp import web
from transformers import AutoTokenizer

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.engine_api.sglang_client import SGLangClient
from roost.rollout.gateway.control.wire import PauseState
from roost.rollout.keys import bearer
from roost.rollout.store.samples import Sample
from roost.trainer.advantages import AdvantageConfig, EstimatorConfig, compute_advantages
from roost.trainer.hf_checkpoint import CheckpointMismatch
from roost.trainer.sample_sources import group_samples, samples_from_store
from roost.trainer.weight_sync import WeightSyncError, sync_weights

QUESTIONS = ["Name a colour.", "Count to three."]


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    """This module's own engine: its weights get replaced."""
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


async def record(http: httpx.AsyncClient, gateway_url: str, admin_key: str, rollouts: int = 4) -> list[str]:
    """GRPO groups of two-turn chats through the gateway, with rewards; returns group ids. The
    rewards of a group always differ (rollout i gets i plus a tenth of what its reply varies), so
    no group's advantages are all zero, whatever the engine samples."""
    groups, admin = [], bearer(admin_key)
    for g, question in enumerate(QUESTIONS):
        group = f"step-0/task-{g}"
        groups.append(group)
        for i in range(rollouts):
            session = (await http.post(f"{gateway_url}/sessions", json={"group_id": group}, headers=admin)).json()
            messages = [{"role": "user", "content": question}]
            reply = ""
            for _ in range(2):
                answer = await http.post(
                    f"{session['base_url']}/chat/completions",
                    headers=bearer(session["key"]),
                    json={"model": "tiny", "messages": messages, "max_tokens": 6, "temperature": 1.0},
                )
                assert answer.status_code == 200, answer.text
                reply = answer.json()["choices"][0]["message"].get("content") or ""
                messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "Again."}]
            sid = session["session_id"]
            await http.post(
                f"{gateway_url}/sessions/{sid}/reward", json={"reward": i + len(reply) % 3 / 10}, headers=admin
            )
            await http.post(f"{gateway_url}/sessions/{sid}/finish", json={}, headers=admin)
    return groups


async def engine_logprobs(engine_url: str, prompt: list[int]) -> tuple[list[int], list[float], str]:
    async with SGLangClient(engine_url) as client:
        gen = await client.generate(prompt, {"max_new_tokens": 8, "temperature": 0.0, "ignore_eos": True})
    return gen.output_ids, gen.output_logprobs, gen.weight_version


async def test_train_on_recorded_trajectories_then_engine_serves_updated_weights(
    megatron_world, engine, gateway, tiny_model_path, tmp_path
):
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    gateway_url, store, admin_key = gateway
    async with httpx.AsyncClient(timeout=120) as http:
        groups = await record(http, gateway_url, admin_key)
    samples = list(samples_from_store(store, group_ids=groups))
    assert len({s.session_id for s in samples}) == 8 and all(s.num_sampled for s in samples)

    policy = MegatronPolicy(TrainConfig(checkpoint=str(tiny_model_path), lr=3e-3, token_budget=512))
    # the recorded tokens are exact: the trainer's logprobs are the engine's
    for sample, lp in zip(samples, policy.logprobs(samples)):
        rollout = torch.tensor([sample.rollout_logprobs[i] for i, m in enumerate(sample.loss_mask) if m])
        assert float((lp - rollout).abs().max()) <= 1e-4

    config = AdvantageConfig(default=EstimatorConfig("grpo", {"equal_rewards": "zero"}))
    for _ in range(3):
        scored, stats = compute_advantages(group_samples(samples), config)
        assert stats["samples"] == len(samples)
        assert policy.train_step(scored).updated
    assert policy.steps == 3

    folder = policy.export_hf(tmp_path / "step-3")
    prompt = AutoTokenizer.from_pretrained(tiny_model_path)("The weather today")["input_ids"]
    before = await engine_logprobs(engine.url, prompt)
    result = await sync_weights(
        engine.url,
        folder,
        weight_version="step-3",
        engine_key=engine.api_key,
        gateway_url=gateway_url,
        admin_key=admin_key,
    )
    assert result.weight_version == "step-3"

    ids, logprobs, version = await engine_logprobs(engine.url, prompt)
    assert version == "step-3" and logprobs != before[1]
    probe = Sample.from_turns([(prompt, ids, logprobs)], session_id="probe", group_id="probe")
    ours = policy.logprobs([probe])[0]
    assert float((ours - torch.tensor(logprobs)).abs().max()) <= 1e-4

    # later calls through the gateway are served, and recorded, at the new version
    async with httpx.AsyncClient(timeout=120) as http:
        session = (
            await http.post(f"{gateway_url}/sessions", json={"group_id": "step-1/task-0"}, headers=bearer(admin_key))
        ).json()
        answer = await http.post(
            f"{session['base_url']}/chat/completions",
            headers=bearer(session["key"]),
            json={"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3},
        )
        assert answer.status_code == 200
        await http.post(f"{gateway_url}/sessions/{session['session_id']}/finish", json={}, headers=bearer(admin_key))
    recorded = list(samples_from_store(store, session_ids=[session["session_id"]]))
    assert {c.weight_version for s in recorded for c in s.calls} == {"step-3"}


class PauseSpy:
    """A stand-in gateway that records /admin/pause and /admin/resume, which weights the engine
    served at each, and the key each came with."""

    def __init__(self, engine_url: str):
        self.engine_url = engine_url
        self.events: list[tuple[str, str, str | None]] = []

    async def handle(self, request: web.Request) -> web.Response:
        async with SGLangClient(self.engine_url) as client:
            version = (await client.model_info())["weight_version"]
        self.events.append((request.match_info["action"], version, request.headers.get("authorization")))
        state = PauseState(paused=request.match_info["action"] == "pause", in_flight=0)
        return web.json_response(state.model_dump(exclude_unset=True))

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/admin/{action}", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"


async def test_the_swap_happens_while_the_gateway_is_paused(engine, tiny_model_path, tmp_path):
    spy = PauseSpy(engine.url)
    url = await spy.start()
    try:
        await sync_weights(
            engine.url,
            tiny_model_path,
            weight_version="spy",
            engine_key=engine.api_key,
            gateway_url=url,
            admin_key="rak-the-admin-key",
        )
    finally:
        await spy.runner.cleanup()
    assert [e[0] for e in spy.events] == ["pause", "resume"]
    assert spy.events[0][1] != "spy" and spy.events[1][1] == "spy"
    assert {e[2] for e in spy.events} == {"Bearer rak-the-admin-key"}


async def test_an_engine_update_without_the_engine_key_is_refused_and_resumes(engine, tiny_model_path):
    spy = PauseSpy(engine.url)
    url = await spy.start()
    try:
        with pytest.raises(WeightSyncError, match="401"):
            await sync_weights(engine.url, tiny_model_path, weight_version="keyless", gateway_url=url)
    finally:
        await spy.runner.cleanup()
    assert [e[0] for e in spy.events] == ["pause", "resume"]
    async with SGLangClient(engine.url) as client:
        assert (await client.model_info())["weight_version"] != "keyless"


def copy_checkpoint(src, dst):
    shutil.copytree(src, dst)
    return dst


async def test_vocab_size_mismatch_is_refused_before_pausing(engine, tiny_model_path, tmp_path):
    folder = copy_checkpoint(tiny_model_path, tmp_path / "bad-vocab")
    config = json.loads((folder / "config.json").read_text())
    config["vocab_size"] = 1000
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointMismatch, match="vocab_size 1000"):
        await sync_weights(engine.url, folder, gateway_url="http://127.0.0.1:9")  # the gateway is never called


async def test_tokenizer_mismatch_is_refused(engine, tiny_model_path, tmp_path):
    folder = copy_checkpoint(tiny_model_path, tmp_path / "bad-tokenizer")
    tok = json.loads((folder / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = list(vocab)[100:102]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(CheckpointMismatch, match="different tokenizers"):
        await sync_weights(engine.url, folder)


async def test_failed_load_keeps_old_weights_and_resumes(engine, tiny_model_path, tmp_path):
    folder = copy_checkpoint(tiny_model_path, tmp_path / "corrupt")
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    async with SGLangClient(engine.url) as client:
        version = (await client.model_info())["weight_version"]
    with pytest.raises(WeightSyncError, match="did not load"):
        await sync_weights(engine.url, folder, weight_version="never", engine_key=engine.api_key)
    async with SGLangClient(engine.url) as client:
        assert (await client.model_info())["weight_version"] == version
