"""The gateway over a real vLLM server (`roost engine --backend vllm`): multi-turn tool chat
through the openai SDK, streamed and not, recorded token for token with unbroken prefix links;
pause and resume of vLLM; a weight update between two calls of one session changes the second
call's logprobs and its recorded weight version.

One vLLM server for the module (it takes minutes to start on a shared CPU). Skipped when no
vLLM virtualenv is found, except with ROOST_REQUIRE_VLLM=1 (CI), where that fails.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import httpx
import openai
import pytest

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.engine.tiny_model import tiny_model_dir
from roost.rollout.engine_client import detect_backend
from roost.rollout.keys import bearer
from roost.rollout.vllm_client import VLLMClient
from roost.tests.rollout.gateway_helpers import (
    WEATHER_TOOLS, EngineSpy, assert_token_exact, new_session, start_gateway, stored_calls,
)
from roost.trainer.weight_sync import sync_weights

pytestmark = pytest.mark.vllm

# No graph compilation: it costs minutes of CPU at startup and nothing here is timed.
VLLM_ARGS = "--optimization-level 0 --enforce-eager --max-model-len 4096"


@pytest.fixture(scope="module")
def vllm_engine(vllm_py):
    process = EngineProcess("tiny-vllm", extra_args=["--backend", "vllm", "--vllm-args", VLLM_ARGS],
                            startup_timeout_s=900)
    with process:
        yield process


@pytest.fixture(scope="module")
def spy(vllm_engine):
    with EngineSpy(vllm_engine.url) as spy:
        yield spy


@pytest.fixture(scope="module")
def gateway(spy, vllm_engine, tmp_path_factory):
    store = tmp_path_factory.mktemp("store") / "trajectories.sqlite"
    server = start_gateway(spy.url, store, backend="vllm", engine_key=vllm_engine.api_key, model="tiny-vllm",
                           pause_wait_s=30.0)
    yield server, store
    server.stop()


def tool_history() -> list[dict]:
    """A conversation in which the assistant already called a tool and got its result."""
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    return [{"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C."}]


def reply_message(client: openai.OpenAI, messages: list[dict], stream: bool) -> dict:
    kwargs = dict(model="tiny-vllm", messages=messages, tools=WEATHER_TOOLS, max_tokens=6, seed=7)
    if not stream:
        message = client.chat.completions.create(**kwargs).choices[0].message
        return message.model_dump(exclude_none=True)
    content, calls = "", []
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        if chunk.choices and chunk.choices[0].delta.content:
            content += chunk.choices[0].delta.content
        if chunk.choices and chunk.choices[0].delta.tool_calls:
            calls += [c.model_dump(exclude_none=True) for c in chunk.choices[0].delta.tool_calls]
    return {"role": "assistant", "content": content, **({"tool_calls": calls} if calls else {})}


@pytest.mark.parametrize("stream", [False, True])
def test_tool_chat_is_token_exact_with_unbroken_prefix_links(gateway, spy, stream):
    server, store = gateway
    session = new_session(server)
    client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"], max_retries=0)
    convo = tool_history()
    for turn in range(3):
        convo += [reply_message(client, convo, stream), {"role": "user", "content": f"And tomorrow ({turn})?"}]
    calls = stored_calls(store, session["session_id"])
    assert [c.kind for c in calls] == ["root", "extend", "extend"]
    for parent, child in zip(calls, calls[1:]):
        path = list(parent.prompt_ids) + list(parent.sampled_ids)
        assert child.parent_call_id == parent.call_id
        assert list(child.prompt_ids[: len(path)]) == path
    assert assert_token_exact(store, session["session_id"], spy) == 3
    # vLLM's raw logprobs of the sampled tokens: real log-probabilities, not zeros standing in
    assert all(lp <= 0.0 for c in calls for lp in c.sampled_logprobs)
    assert any(lp < 0.0 for c in calls for lp in c.sampled_logprobs)


def test_engine_kind_is_detected(vllm_engine):
    assert asyncio.run(detect_backend(vllm_engine.url)) == "vllm"


def test_pause_holds_generation_until_resume(vllm_engine, tiny_vllm_ids):
    async def scenario() -> tuple[bool, bool, int]:
        async with VLLMClient(vllm_engine.url, api_key=vllm_engine.api_key) as client:
            await client.pause_generation()
            paused = await client.is_paused()
            task = asyncio.create_task(client.generate(tiny_vllm_ids, {"max_new_tokens": 3, "ignore_eos": True}))
            await asyncio.sleep(1.5)
            held = not task.done()
            await client.continue_generation()
            generation = await asyncio.wait_for(task, 60)
            return paused and not await client.is_paused(), held, len(generation.output_ids)

    paused_then_resumed, held, sampled = asyncio.run(scenario())
    assert paused_then_resumed and held and sampled == 3


@pytest.fixture(scope="module")
def tiny_vllm_ids() -> list[int]:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir(variant="tiny-vllm")).encode("The weather in Paris is")


def perturbed_checkpoint(folder: Path) -> Path:
    """The tiny-vllm model with every weight moved (embeddings, tied to the output head, scaled by 3),
    saved as Hugging Face saves a tied model: without `lm_head.weight`."""
    import torch
    from safetensors.torch import load_file, save_file

    source = tiny_model_dir(variant="tiny-vllm")
    shutil.copytree(source, folder)
    weights = load_file(source / "model.safetensors")
    gen = torch.Generator().manual_seed(1)
    weights = {name: t * 3 if "embed_tokens" in name else t + 0.02 * torch.randn(t.shape, generator=gen)
               for name, t in weights.items()}
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def checkpoint_logprobs(folder: Path, prompt: list[int], sampled: list[int]) -> list[float]:
    """What the trainer would compute: the checkpoint's own logprobs of the sampled tokens."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + sampled])).logits[0]
    logprobs = torch.log_softmax(logits, -1)
    return [logprobs[len(prompt) - 1 + i, t].item() for i, t in enumerate(sampled)]


def test_weight_update_between_two_calls_changes_logprobs(gateway, vllm_engine, tmp_path):
    server, store = gateway
    session = new_session(server)
    messages = [{"role": "user", "content": "Name a city."}]

    def call() -> None:
        client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"], max_retries=0)
        client.chat.completions.create(model="tiny-vllm", messages=messages, max_tokens=4, temperature=0)

    call()
    folder = perturbed_checkpoint(tmp_path / "step-1")
    try:
        result = asyncio.run(sync_weights(vllm_engine.url, folder, weight_version="1", engine_key=vllm_engine.api_key,
                                          gateway_url=server.url, admin_key=server.admin_key))
        assert result.weight_version == "1"
        call()
    finally:
        asyncio.run(sync_weights(vllm_engine.url, tiny_model_dir(variant="tiny-vllm"), weight_version="0",
                                 engine_key=vllm_engine.api_key))
    before, after = stored_calls(store, session["session_id"])
    assert (before.weight_version, after.weight_version) == ("default", "1")
    assert list(after.prompt_ids) == list(before.prompt_ids)
    # the recorded logprobs are the new checkpoint's own, output head included (vLLM loses a
    # tied head on reload unless it is in the folder: roost.rollout.vllm_weights adds it)
    expected = checkpoint_logprobs(folder, list(after.prompt_ids), list(after.sampled_ids))
    assert max(abs(a - b) for a, b in zip(after.sampled_logprobs, expected)) < 1e-4
    assert max(abs(a - b) for a, b in zip(before.sampled_logprobs, after.sampled_logprobs)) > 0.1
    assert not list(tmp_path.glob(".step-1-vllm-*")), "the staged folder is removed after the reload"
    info = httpx.get(f"{vllm_engine.url}/weight_info", headers=bearer(vllm_engine.api_key)).json()
    assert info == {"weight_version": "0"}
