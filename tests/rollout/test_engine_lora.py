"""Several LoRA adapters on one embedded engine: PEFT is the oracle for each adapter's logprobs, a
batch mixing adapters gives every row what it gets alone, adapters load and unload at run time
with precise errors while the server keeps serving, and the gateway routes a harness's `model` to
its adapter and records it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import openai
import pytest
import torch
import uvicorn
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.engine.tiny_model import tiny_model_dir
from roost.rollout.engine_api.sglang_client import EngineRejected, SGLangClient
from roost.serving.thread import UvicornThread
from roost.tests.rollout.gateway_helpers import new_session, start_gateway, stored_calls
from roost.viewer.app import ViewerConfig, build_app

PROMPT = "The adapter under test says"
MAX_RANK = 8


def make_adapter(base: Path, folder: Path, *, rank: int, targets: list[str], seed: int, alpha: float = 16) -> Path:
    """A PEFT adapter with nonzero lora_B (PEFT starts B at zero, which would change nothing)."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    peft = get_peft_model(model, LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets, task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.2)
    peft.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def adapters(tiny_model_path, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return {
        "x": make_adapter(
            tiny_model_path,
            root / "x",
            rank=4,
            seed=1,
            targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        ),
        "y": make_adapter(
            tiny_model_path, root / "y", rank=2, seed=2, alpha=4, targets=["v_proj", "up_proj", "lm_head"]
        ),
        "too-wide": make_adapter(tiny_model_path, root / "wide", rank=MAX_RANK * 2, seed=3, targets=["q_proj"]),
        "other-base": make_adapter(
            tiny_model_dir(variant="tiny-vllm"), root / "other", rank=2, seed=4, targets=["q_proj"]
        ),
    }


@pytest.fixture(scope="module")
def engine():
    process = EngineProcess("tiny", extra_args=["--max-lora-rank", str(MAX_RANK), "--max-loras", "3"])
    with process:
        yield process


def prompt_ids(model_path: Path) -> list[int]:
    return AutoTokenizer.from_pretrained(model_path).encode(PROMPT, add_special_tokens=False)


async def generate(url: str, ids: list[int], lora: str | None, tokens: int = 12):
    async with SGLangClient(url) as client:
        params = {"max_new_tokens": tokens, "temperature": 0.0, "ignore_eos": True}
        return await client.generate(ids, params, lora=lora)


async def streamed(url: str, ids: list[int], lora: str | None, tokens: int = 12) -> list[int]:
    async with SGLangClient(url) as client:
        params = {"max_new_tokens": tokens, "temperature": 0.0, "ignore_eos": True}
        return [t async for delta in client.generate_stream(ids, params, lora=lora) for t in delta.output_ids]


async def load(engine: EngineProcess, name: str, path: Path) -> dict:
    async with SGLangClient(engine.url, api_key=engine.api_key) as client:
        return await client.load_lora_adapter(name, str(path))


async def unload(engine: EngineProcess, name: str) -> dict:
    async with SGLangClient(engine.url, api_key=engine.api_key) as client:
        return await client.unload_lora_adapter(name)


def peft_logprobs(base: Path, adapter: Path | None, prompt: list[int], sampled: list[int]) -> torch.Tensor:
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    if adapter is not None:
        model = PeftModel.from_pretrained(model, adapter).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + sampled])).logits[0].float()
    return torch.log_softmax(logits, -1)[len(prompt) - 1 : -1].gather(1, torch.tensor(sampled)[:, None])[:, 0]


def test_each_adapter_samples_what_peft_computes(engine, adapters, tiny_model_path):
    for name in ("x", "y"):
        asyncio.run(load(engine, name, adapters[name]))
    ids = prompt_ids(tiny_model_path)
    for name in ("x", "y"):
        done = asyncio.run(generate(engine.url, ids, name))
        oracle = peft_logprobs(tiny_model_path, adapters[name], ids, done.output_ids)
        torch.testing.assert_close(torch.tensor(done.output_logprobs), oracle, atol=1e-4, rtol=0)
        base = peft_logprobs(tiny_model_path, None, ids, done.output_ids)
        assert (base - oracle).abs().max() > 1e-2  # the adapter matters: the oracle can tell them apart
        assert asyncio.run(streamed(engine.url, ids, name)) == done.output_ids
    listed = httpx.get(f"{engine.url}/v1/models").json()["data"]
    assert [card["id"] for card in listed[1:]] == ["x", "y"]
    assert listed[1]["root"] == str(adapters["x"]) and listed[1]["parent"] == listed[0]["id"]


def test_a_mixed_batch_gives_each_row_what_it_gets_alone(engine, adapters, tiny_model_path):
    for name in ("x", "y"):
        if name not in httpx.get(f"{engine.url}/get_server_info").json()["loaded_loras"]:
            asyncio.run(load(engine, name, adapters[name]))
    ids = prompt_ids(tiny_model_path)
    loras = ["x", None, "y", "x", None, "y"]
    alone = [asyncio.run(generate(engine.url, ids, lora, 16)) for lora in loras[:3]]

    async def together():
        return await asyncio.gather(*(generate(engine.url, ids, lora, 16) for lora in loras))

    before = httpx.get(f"{engine.url}/get_server_info").json()["decode_steps"]
    mixed = asyncio.run(together())
    steps = httpx.get(f"{engine.url}/get_server_info").json()["decode_steps"] - before
    assert steps < 2 * 15  # the six requests were decoded in shared steps, not one after another
    for i, done in enumerate(mixed):
        assert done.output_ids == alone[i % 3].output_ids
        torch.testing.assert_close(done.output_logprobs, alone[i % 3].output_logprobs, atol=1e-5, rtol=0)
    assert len({tuple(a.output_ids) for a in alone}) == 3  # three different models answered


def test_load_generate_unload_then_the_name_is_refused(engine, adapters, tiny_model_path):
    ids = prompt_ids(tiny_model_path)
    asyncio.run(load(engine, "once", adapters["x"]))
    assert len(asyncio.run(generate(engine.url, ids, "once")).output_ids) == 12
    answer = asyncio.run(unload(engine, "once"))
    assert answer["success"] and answer["in_flight"] == 0
    with pytest.raises(EngineRejected) as refused:
        asyncio.run(generate(engine.url, ids, "once"))
    assert refused.value.status == 404
    assert "'once' is not loaded" in str(refused.value) and "/v1/load_lora_adapter" in str(refused.value)
    assert len(asyncio.run(generate(engine.url, ids, None)).output_ids) == 12  # still serving


def test_load_inplace_swaps_an_adapters_weights(engine, adapters, tiny_model_path):
    """New weights after a training step go in under the same name; the old ones' cached prefixes
    are not reused."""
    ids = prompt_ids(tiny_model_path)
    asyncio.run(load(engine, "policy", adapters["x"]))
    first = asyncio.run(generate(engine.url, ids, "policy"))

    async def swap():
        async with SGLangClient(engine.url, api_key=engine.api_key) as client:
            await client.load_lora_adapter("policy", str(adapters["y"]), replace=True)

    asyncio.run(swap())
    second = asyncio.run(generate(engine.url, ids, "policy"))
    asyncio.run(unload(engine, "policy"))
    oracle = peft_logprobs(tiny_model_path, adapters["y"], ids, second.output_ids)
    torch.testing.assert_close(torch.tensor(second.output_logprobs), oracle, atol=1e-4, rtol=0)
    assert first.output_ids != second.output_ids


def test_bad_adapters_are_refused_precisely(engine, adapters, tmp_path):
    def post(path: str, body: dict, key: str | None = engine.api_key) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.post(f"{engine.url}{path}", json=body, headers=headers, timeout=60)

    cases = [
        ({"lora_name": "nowhere", "lora_path": str(tmp_path)}, 400, "adapter_config.json"),
        ({"lora_name": "wide", "lora_path": str(adapters["too-wide"])}, 400, "--max-lora-rank 8"),
        ({"lora_name": "other", "lora_path": str(adapters["other-base"])}, 400, "does not fit the base model"),
        ({"lora_name": "x2"}, 400, "lora_path"),
    ]
    for body, status, needle in cases:
        answer = post("/v1/load_lora_adapter", body)
        assert answer.status_code == status, answer.text
        assert needle in answer.json()["error"]["message"]
    assert post("/v1/load_lora_adapter", {"lora_name": "k", "lora_path": "/x"}, key=None).status_code == 401
    loaded = httpx.get(f"{engine.url}/get_server_info").json()["loaded_loras"]
    fill = [f"fill-{i}" for i in range(3 - len(loaded))]
    for name in fill:
        assert post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(adapters["y"])}).status_code == 200
    full = post("/v1/load_lora_adapter", {"lora_name": "one-more", "lora_path": str(adapters["y"])})
    assert full.status_code == 400 and "--max-loras" in full.json()["error"]["message"]
    taken = post("/v1/load_lora_adapter", {"lora_name": (fill or loaded)[0], "lora_path": str(adapters["y"])})
    assert taken.status_code == 400 and "already loaded" in taken.json()["error"]["message"]
    for name in fill:
        asyncio.run(unload(engine, name))
    missing = post("/v1/unload_lora_adapter", {"lora_name": "never"})
    assert missing.status_code == 404 and "not loaded" in missing.json()["error"]["message"]
    listed = httpx.post(f"{engine.url}/generate", json={"input_ids": [1, 2], "lora_path": "never"})
    assert listed.status_code == 404 and "loaded:" in listed.json()["error"]["message"]
    assert httpx.get(f"{engine.url}/health").status_code == 200


def test_the_gateway_routes_by_adapter_and_records_it(engine, adapters, tiny_model_path, tmp_path):
    """A harness names the adapter as its `model` (vLLM's convention); the stored call names it, and
    its logprobs are the adapter's (PEFT's oracle again)."""
    if "x" not in httpx.get(f"{engine.url}/get_server_info").json()["loaded_loras"]:
        asyncio.run(load(engine, "x", adapters["x"]))
    server = start_gateway(engine.url, tmp_path / "store.sqlite")
    try:
        session = new_session(server)
        client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"], max_retries=0)
        assert [m.id for m in client.models.list()][:2] == ["tiny", "x"]
        messages = [{"role": "user", "content": "Hello there."}]
        for model in ("x", "tiny"):
            client.chat.completions.create(model=model, messages=messages, max_tokens=6, temperature=0)
        stream = client.chat.completions.create(model="x", messages=messages, max_tokens=4, stream=True)
        assert [chunk.model for chunk in stream][0] == "x"
        with pytest.raises(openai.NotFoundError, match="LoRA adapters"):
            client.chat.completions.create(model="nope", messages=messages, max_tokens=2)
        adapted, base, streamed_call = stored_calls(tmp_path / "store.sqlite", session["session_id"])
        asyncio.run(unload(engine, "x"))  # gone from the engine since the gateway last asked
        with pytest.raises(openai.BadRequestError, match="'x' is not loaded"):
            client.chat.completions.create(model="x", messages=messages, max_tokens=2)
        with pytest.raises(openai.NotFoundError, match="is not served here"):
            client.chat.completions.create(model="x", messages=messages, max_tokens=2)
    finally:
        server.stop()
    assert (adapted.adapter, adapted.model, base.adapter, streamed_call.adapter) == ("x", "x", "", "x")
    app = build_app(ViewerConfig(store=tmp_path / "store.sqlite", tokenizer=tiny_model_path))
    with UvicornThread(uvicorn.Config(app, log_level="warning"), "the viewer") as viewer:
        assert "LoRA adapter x" in httpx.get(f"{viewer}/calls/{adapted.call_id}").text
        assert "LoRA adapter" not in httpx.get(f"{viewer}/calls/{base.call_id}").text
    prompt, sampled = list(adapted.prompt_ids), list(adapted.sampled_ids)
    oracle = peft_logprobs(tiny_model_path, adapters["x"], prompt, sampled)
    torch.testing.assert_close(torch.tensor(list(adapted.sampled_logprobs)), oracle, atol=1e-4, rtol=0)


def test_unloading_with_requests_in_flight_lets_them_finish(engine, adapters, tiny_model_path):
    ids = prompt_ids(tiny_model_path)
    asyncio.run(load(engine, "leaving", adapters["x"]))

    async def run():
        task = asyncio.create_task(generate(engine.url, ids, "leaving", tokens=300))
        async with httpx.AsyncClient() as http:
            while (await http.get(f"{engine.url}/get_server_info")).json()["running"] == 0:
                await asyncio.sleep(0.01)
        answer = await unload(engine, "leaving")
        return answer, await task

    answer, done = asyncio.run(run())
    assert answer["in_flight"] == 1 and "finish with it" in answer["message"]
    assert len(done.output_ids) == 300 and done.finish_reason["type"] == "length"
    oracle = peft_logprobs(tiny_model_path, adapters["x"], ids, done.output_ids)
    torch.testing.assert_close(torch.tensor(done.output_logprobs), oracle, atol=1e-4, rtol=0)
