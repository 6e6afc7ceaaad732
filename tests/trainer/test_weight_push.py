"""Weight sync over HTTP (`transport="http"`): the trainer's own state dict goes to the engine
with no folder written, and the engine then serves exactly what a disk sync of the same weights
serves (bit-equal logprobs) and what Hugging Face's forward on the exported folder computes; the
send happens while the engine serves, the commit while the gateway is paused; a refused send
changes nothing and pauses nothing."""

from __future__ import annotations

import httpx
import pytest
import torch

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.lora import KNOWN_TARGETS, Adapter, LoraSpec
from roost.tests.rollout.engine_helpers import recorded_and_forward_logprobs
from roost.tests.trainer.test_train_and_sync import PauseSpy
from roost.trainer.hf_checkpoint import CheckpointMismatch
from roost.trainer.weight_push import tensor_bytes
from roost.trainer.weight_sync import WeightSyncError, sync_adapter, sync_weights

PROMPT = "The weather today"
SPEC = LoraSpec(rank=4, alpha=8.0, targets=tuple(sorted(KNOWN_TARGETS)))
ADMIN = "rak-the-admin-key"


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    """This module's own engine: its weights change."""
    process = EngineProcess("tiny")
    with process:
        yield process


async def first_answer(engine: EngineProcess, lora: str | None = None) -> dict:
    body = {
        "text": PROMPT,
        "return_logprob": True,
        "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True},
    }
    async with httpx.AsyncClient(timeout=60) as http:
        answer = (await http.post(f"{engine.url}/generate", json={**body, "lora_path": lora})).json()
    assert answer["meta_info"]["cached_tokens"] == 0, "the sync must drop the prefix cache"
    return answer


def logprobs(answer: dict) -> list[float]:
    return [entry[0] for entry in answer["meta_info"]["output_token_logprobs"]]


def perturb(policy, only_adapters: bool = False, seed: int = 0) -> None:
    from roost.trainer.megatron import lora

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if not only_adapters or lora.is_adapter_name(name):
                param.add_(0.05 * torch.randn(param.shape, generator=gen).to(param.dtype))


async def test_http_sync_of_the_trainers_state_equals_a_disk_sync(megatron_world, engine, tiny_model_path, tmp_path):
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    policy = MegatronPolicy(TrainConfig(checkpoint=str(tiny_model_path), token_budget=512))
    perturb(policy)
    state = policy.hf_state()
    spy = PauseSpy(engine.url)
    gateway = await spy.start()
    keys = dict(engine_key=engine.api_key, gateway_url=gateway, admin_key=ADMIN)
    try:
        before = await first_answer(engine)
        sent = await sync_weights(
            engine.url, tensors=state, transport="http", chunk_bytes=256 * 1024, weight_version="http-1", **keys
        )
        over_http = await first_answer(engine)
        folder = policy.export_hf(tmp_path / "hf")
        await sync_weights(engine.url, folder, weight_version="disk-1", **keys)
        from_disk = await first_answer(engine)
    finally:
        await spy.runner.cleanup()
    assert sent.weight_version == "http-1" and sent.bytes == tensor_bytes(state)
    # the commit, not the send, is what the gateway waits for: paused on the old weights, resumed on the new
    assert [(e[0], e[1]) for e in spy.events[:2]] == [
        ("pause", before["meta_info"]["weight_version"]),
        ("resume", "http-1"),
    ]
    assert sent.paused_s < sent.seconds
    assert logprobs(over_http) != logprobs(before)
    assert over_http["output_ids"] == from_disk["output_ids"] and logprobs(over_http) == logprobs(from_disk)
    recorded, forward = recorded_and_forward_logprobs(over_http, folder, PROMPT)
    torch.testing.assert_close(recorded, forward, atol=1e-5, rtol=0)


async def test_http_sync_of_the_trainers_adapter_equals_a_disk_sync(megatron_world, engine, tiny_model_path, tmp_path):
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    policy = MegatronPolicy(TrainConfig(checkpoint=str(tiny_model_path), lora=SPEC, token_budget=512))
    perturb(policy, only_adapters=True, seed=1)
    adapter = Adapter(SPEC, policy.adapter_state(), str(tiny_model_path))
    keys = dict(engine_key=engine.api_key)
    sent = await sync_adapter(
        engine.url, None, "pushed", adapter=adapter, transport="http", weight_version="l-1", **keys
    )
    assert sent.weight_version == "l-1" and sent.bytes == tensor_bytes(adapter.weights)
    over_http = await first_answer(engine, "pushed")
    folder = policy.save_adapter(tmp_path / "adapter")
    await sync_adapter(engine.url, folder, "loaded", weight_version="l-2", **keys)
    from_disk = await first_answer(engine, "loaded")
    assert logprobs(over_http) == logprobs(from_disk) != logprobs(await first_answer(engine))
    # a folder goes over HTTP too (read here, not by the engine)
    again = await sync_adapter(engine.url, folder, "pushed", transport="http", weight_version="l-3", **keys)
    assert again.weight_version == "l-3" and logprobs(await first_answer(engine, "pushed")) == logprobs(from_disk)


async def test_a_refused_http_sync_pauses_nothing_and_changes_nothing(engine, tiny_model_path):
    from safetensors.torch import load_file

    tensors = load_file(tiny_model_path / "model.safetensors")
    spy = PauseSpy(engine.url)
    gateway = await spy.start()
    keys = dict(engine_key=engine.api_key, gateway_url=gateway, admin_key=ADMIN, transport="http")
    try:
        before = await first_answer(engine)
        short = {k: v for k, v in tensors.items() if k != "model.norm.weight"}
        with pytest.raises(WeightSyncError, match="missing tensor model.norm.weight"):
            await sync_weights(engine.url, tensors=short, weight_version="never", **keys)
        wide = {**tensors, "model.embed_tokens.weight": torch.zeros(7, tensors["model.embed_tokens.weight"].shape[1])}
        with pytest.raises(CheckpointMismatch, match="7 embedding rows"):
            await sync_weights(engine.url, tensors=wide, weight_version="never", **keys)
        with pytest.raises(WeightSyncError, match="transport 'disk' loads a folder"):
            await sync_weights(engine.url, tensors=tensors, engine_key=engine.api_key)
    finally:
        await spy.runner.cleanup()
    assert spy.events == []
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {engine.api_key}"}) as http:
        await http.post(f"{engine.url}/flush_cache")  # so both answers prefill alike: bit-equal
    after = await first_answer(engine)
    assert after["meta_info"]["weight_version"] == before["meta_info"]["weight_version"]
    assert logprobs(after) == logprobs(before)
