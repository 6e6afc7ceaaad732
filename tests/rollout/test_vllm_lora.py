"""LoRA through a real vLLM server (`roost engine --backend vllm --enable-lora`): an adapter PEFT
saved loads at run time, generates with PEFT's logprobs, and once unloaded is refused; a LoRA weight
sync replaces it in place at a new weight version (with an adapted `lm_head` on tied embeddings)."""

from __future__ import annotations

import asyncio

import pytest

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.engine.tiny_model import tiny_model_dir
from roost.rollout.engine_api.sglang_client import EngineRejected
from roost.rollout.engine_api.vllm_client import VLLMClient
from roost.tests.rollout.test_engine_lora import make_adapter, peft_logprobs, prompt_ids
from roost.tests.rollout.test_vllm_gateway import VLLM_ARGS

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def vllm_lora_engine(vllm_py):
    process = EngineProcess(
        "tiny-vllm",
        extra_args=["--backend", "vllm", "--enable-lora", "--max-lora-rank", "8", "--vllm-args", VLLM_ARGS],
        startup_timeout_s=900,
    )
    with process:
        yield process


def test_vllm_serves_a_peft_adapter_loaded_at_run_time(vllm_lora_engine, tmp_path):
    base = tiny_model_dir(variant="tiny-vllm")
    folder = make_adapter(base, tmp_path / "x", rank=4, seed=1, targets=["q_proj", "v_proj", "up_proj", "down_proj"])
    ids = prompt_ids(base)

    async def run():
        async with VLLMClient(vllm_lora_engine.url, api_key=vllm_lora_engine.api_key) as client:
            await client.load_lora_adapter("x", str(folder))
            assert await client.lora_adapters() == ["x"]
            done = await client.generate(ids, {"max_new_tokens": 8, "temperature": 0.0, "ignore_eos": True}, lora="x")
            await client.unload_lora_adapter("x")
            with pytest.raises(EngineRejected) as refused:
                await client.generate(ids, {"max_new_tokens": 2}, lora="x")
            return done, refused.value

    done, refused = asyncio.run(run())
    oracle = peft_logprobs(base, folder, ids, done.output_ids)
    assert max(abs(a - b) for a, b in zip(done.output_logprobs, oracle.tolist())) < 1e-4
    assert refused.status == 404 and "x" in str(refused)  # vLLM: "The model `x` does not exist."


def test_a_lora_weight_sync_replaces_the_adapter_in_place_at_a_new_version(vllm_lora_engine, tmp_path):
    from roost.trainer.weight_sync import sync_adapter

    base = tiny_model_dir(variant="tiny-vllm")
    ids = prompt_ids(base)
    # lm_head of a model with tied embeddings too: vLLM serves it as PEFT computes it
    targets = ["q_proj", "v_proj", "up_proj", "down_proj", "lm_head"]
    folders = [make_adapter(base, tmp_path / f"step-{i}", rank=4, seed=10 + i, targets=targets) for i in (1, 2)]

    async def run():
        served = []
        async with VLLMClient(vllm_lora_engine.url, api_key=vllm_lora_engine.api_key) as client:
            for version, folder in zip(("3", "4"), folders):
                result = await sync_adapter(
                    vllm_lora_engine.url,
                    folder,
                    "run-lora",
                    weight_version=version,
                    engine_key=vllm_lora_engine.api_key,
                    engine_backend="vllm",
                )
                assert result.weight_version == version
                params = {"max_new_tokens": 8, "temperature": 0.0, "ignore_eos": True}
                served.append(await client.generate(ids, params, lora="run-lora"))
            assert await client.lora_adapters() == ["run-lora"]
            await client.unload_lora_adapter("run-lora")
        return served

    served = asyncio.run(run())
    assert [done.weight_version for done in served] == ["3", "4"]
    for done, folder in zip(served, folders):  # the second load replaced the first's weights
        oracle = peft_logprobs(base, folder, ids, done.output_ids)
        assert max(abs(a - b) for a, b in zip(done.output_logprobs, oracle.tolist())) < 1e-4
