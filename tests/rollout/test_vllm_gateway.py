"""The gateway over a real vLLM server (`roost engine --backend vllm`): multi-turn tool chat
through the openai SDK, streamed and not, recorded token for token with unbroken prefix links;
pause and resume of vLLM; a weight update between two calls of one session changes the second
call's logprobs and its recorded weight version; the `openai` pass-through over vLLM's own
OpenAI routes records the token ids and logprobs vLLM returns when asked. When things go wrong:
a client that leaves mid-stream aborts its vLLM request (seen in vLLM's own metrics); vLLM
dying mid-call is a 503 with `Retry-After` to the harness and the session is kept, and once
vLLM is back on its port the session's next call is served and recorded.

One vLLM server for the module (it takes minutes to start on a shared CPU), killed and started
again by the last test. Skipped when no vLLM virtualenv is found, except with
ROOST_REQUIRE_VLLM=1 (CI), where that fails.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from pathlib import Path

import httpx
import openai
import psutil
import pytest

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.engine.tiny_model import tiny_model_dir
from roost.rollout.engine_api.client import detect_backend
from roost.rollout.engine_api.vllm_client import VLLMClient
from roost.rollout.keys import bearer
from roost.tests.rollout.gateway_helpers import (
    WEATHER_TOOLS,
    EngineSpy,
    assert_token_exact,
    new_session,
    start_gateway,
    stored_calls,
)
from roost.trainer.weight_sync import sync_weights

pytestmark = pytest.mark.vllm

# No graph compilation: it costs minutes of CPU at startup and nothing here is timed.
VLLM_ARGS = "--optimization-level 0 --enforce-eager --max-model-len 4096"


def vllm_engine_process(port: int = 0, api_key: str | None = None) -> EngineProcess:
    return EngineProcess(
        "tiny-vllm",
        extra_args=["--backend", "vllm", "--vllm-args", VLLM_ARGS],
        port=port,
        api_key=api_key,
        startup_timeout_s=900,
    )


@pytest.fixture(scope="module")
def vllm_engine(vllm_py):
    process = vllm_engine_process()
    with process:
        yield process


@pytest.fixture(scope="module")
def spy(vllm_engine):
    with EngineSpy(vllm_engine.url) as spy:
        yield spy


@pytest.fixture(scope="module")
def gateway(spy, vllm_engine, tmp_path_factory):
    store = tmp_path_factory.mktemp("store") / "trajectories.sqlite"
    server = start_gateway(
        spy.url, store, backend="vllm", engine_key=vllm_engine.api_key, model="tiny-vllm", pause_wait_s=30.0
    )
    yield server, store
    server.stop()


def tool_history() -> list[dict]:
    """A conversation in which the assistant already called a tool and got its result."""
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    return [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C."},
    ]


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


def test_its_kv_capacity_is_read_from_its_cache_config_metric(vllm_engine):
    async def capacity():
        async with VLLMClient(vllm_engine.url, api_key=vllm_engine.api_key) as client:
            return await client.capacity()

    reported = asyncio.run(capacity())
    # VLLM_CPU_KVCACHE_SPACE=1 (GiB) holds far more tokens than the 4096 of one context
    assert reported.programs is None and reported.tokens is not None and reported.tokens >= 4096


def test_as_a_teacher_it_scores_token_ids_as_transformers_does(vllm_engine):
    import math

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tiny_model_dir(variant="tiny-vllm")
    ids = AutoTokenizer.from_pretrained(folder).encode("The weather in Paris is sunny and warm today.")

    async def score():
        async with VLLMClient(vllm_engine.url, api_key=vllm_engine.api_key) as client:
            return await client.score(ids)

    scores = asyncio.run(score())
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0, :-1]
    reference = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()
    assert math.isnan(scores[0]) and len(scores) == len(ids)
    assert max(abs(a - b) for a, b in zip(scores[1:], reference)) <= 1e-4


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
    weights = {
        name: t * 3 if "embed_tokens" in name else t + 0.02 * torch.randn(t.shape, generator=gen)
        for name, t in weights.items()
    }
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
        result = asyncio.run(
            sync_weights(
                vllm_engine.url,
                folder,
                weight_version="1",
                engine_key=vllm_engine.api_key,
                gateway_url=server.url,
                admin_key=server.admin_key,
            )
        )
        assert result.weight_version == "1"
        call()
    finally:
        asyncio.run(
            sync_weights(
                vllm_engine.url, tiny_model_dir(variant="tiny-vllm"), weight_version="0", engine_key=vllm_engine.api_key
            )
        )
    before, after = stored_calls(store, session["session_id"])
    assert (before.weight_version, after.weight_version) == ("default", "1")
    assert list(after.prompt_ids) == list(before.prompt_ids)
    # the recorded logprobs are the new checkpoint's own, output head included (vLLM loses a
    # tied head on reload unless it is in the folder: roost.rollout.engine_api.vllm_weights adds it)
    expected = checkpoint_logprobs(folder, list(after.prompt_ids), list(after.sampled_ids))
    assert max(abs(a - b) for a, b in zip(after.sampled_logprobs, expected)) < 1e-4
    assert max(abs(a - b) for a, b in zip(before.sampled_logprobs, after.sampled_logprobs)) > 0.1
    assert not list(tmp_path.glob(".step-1-vllm-*")), "the staged folder is removed after the reload"
    info = httpx.get(f"{vllm_engine.url}/weight_info", headers=bearer(vllm_engine.api_key)).json()
    assert info == {"weight_version": "0"}


@pytest.mark.parametrize("stream", [False, True])
def test_passthrough_over_vllm_records_its_token_ids_and_logprobs(vllm_engine, tmp_path, stream):
    store = tmp_path / "passthrough.sqlite"
    server = start_gateway(
        f"{vllm_engine.url}/v1",
        store,
        backend="openai",
        model=None,
        upstream_api_key=vllm_engine.api_key,
        served_model_name="tiny-vllm",
        upstream_model=tiny_model_dir(variant="tiny-vllm").name,
    )  # vLLM's name for it
    try:
        session = new_session(server)
        client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"], max_retries=0)
        kwargs = dict(model="tiny-vllm", messages=[{"role": "user", "content": "Name a city."}], max_tokens=5, seed=3)
        if stream:
            chunks = list(client.chat.completions.create(stream=True, **kwargs))
            assert all(c.choices[0].logprobs is None for c in chunks if c.choices)
        else:
            # the gateway asked vLLM for logprobs and ids; the harness, which did not, gets none
            assert client.chat.completions.create(**kwargs).choices[0].logprobs is None
        [call] = stored_calls(store, session["session_id"])
    finally:
        server.stop()
    assert (call.endpoint, call.kind, call.untrainable) == ("chat", "root", None)
    assert len(call.prompt_ids) > 0 and len(call.sampled_ids) == len(call.sampled_logprobs) > 0
    assert all(lp <= 0.0 for lp in call.sampled_logprobs) and any(lp < 0.0 for lp in call.sampled_logprobs)


# Long enough that vLLM on a CPU is still generating when the test acts; never reached when it works.
LONG = 4000


@pytest.fixture(scope="module")
def direct_gateway(vllm_engine, tmp_path_factory):
    """A gateway straight on vLLM (no spy between them), with its own Retry-After."""
    store = tmp_path_factory.mktemp("direct") / "trajectories.sqlite"
    server = start_gateway(
        vllm_engine.url, store, backend="vllm", engine_key=vllm_engine.api_key, model="tiny-vllm", retry_after_s=3
    )
    yield server, store
    server.stop()


def vllm_metric(engine_url: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples in vLLM's own /metrics (matching `labels`)."""
    total = 0.0
    for line in httpx.get(f"{engine_url}/metrics", timeout=30).text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_until(condition, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.2)


def long_call(session: dict, stream: bool) -> dict:
    return {
        "model": "tiny-vllm",
        "messages": [{"role": "user", "content": "Tell me a long story."}],
        "max_tokens": LONG,
        "ignore_eos": True,
        "stream": stream,
    }


def test_a_client_that_leaves_mid_stream_aborts_its_vllm_request(direct_gateway, vllm_engine):
    server, store = direct_gateway
    session = new_session(server)
    url = vllm_engine.url
    generated = vllm_metric(url, "vllm:generation_tokens_total")
    with httpx.Client(timeout=120) as client:
        with client.stream(
            "POST",
            f"{session['base_url']}/chat/completions",
            json=long_call(session, True),
            headers=bearer(session["key"]),
        ) as resp:
            assert resp.status_code == 200
            next(resp.iter_lines())  # the stream has started; now leave
    wait_until(lambda: vllm_metric(url, "vllm:num_requests_running") == 0, "vLLM to drop the request")
    # vLLM stopped generating for nobody: far fewer tokens than the request's max_tokens
    assert vllm_metric(url, "vllm:generation_tokens_total") - generated < LONG
    assert stored_calls(store, session["session_id"]) == []  # no complete reply: nothing recorded


def vllm_processes(engine: EngineProcess) -> list[psutil.Process]:
    """vLLM's processes under `roost engine --backend vllm` (its API server and engine core)."""
    return psutil.Process(engine.process.pid).children(recursive=True)


def test_vllm_dying_mid_call_is_a_503_and_the_session_goes_on_once_it_is_back(direct_gateway, vllm_engine):
    server, store = direct_gateway
    session = new_session(server)
    chat = f"{session['base_url']}/chat/completions"
    headers = bearer(session["key"])
    short = {"model": "tiny-vllm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    assert httpx.post(chat, json=short, headers=headers, timeout=120).status_code == 200
    weight_info = httpx.get(f"{vllm_engine.url}/weight_info", headers=bearer(vllm_engine.api_key), timeout=30)
    version = weight_info.json()["weight_version"]

    answers: list[httpx.Response] = []
    caller = threading.Thread(
        target=lambda: answers.append(httpx.post(chat, json=long_call(session, False), headers=headers, timeout=300))
    )
    caller.start()
    wait_until(lambda: vllm_metric(vllm_engine.url, "vllm:num_requests_running") >= 1, "the call to reach vLLM")
    for process in vllm_processes(vllm_engine):
        process.kill()
    caller.join(120)
    [mid_call] = answers
    assert mid_call.status_code == 503 and mid_call.headers["retry-after"] == "3", mid_call.text
    down = httpx.post(chat, json=short, headers=headers, timeout=120)
    assert down.status_code == 503 and down.headers["retry-after"] == "3", down.text
    assert down.json()["error"]["code"] == "engine_unavailable"
    kept = httpx.get(f"{server.url}/sessions/{session['session_id']}", headers=bearer(server.admin_key))
    assert kept.status_code == 200 and kept.json()["status"] == "open"

    vllm_engine.process.wait(60)  # `roost engine` ends with its vLLM
    with vllm_engine_process(port=vllm_engine.port, api_key=vllm_engine.api_key):
        # A new vLLM reports version 'default' and the gateway holds it stale behind its own until
        # told otherwise. It serves the checkpoint's weights, which are the gateway's version (the
        # weight-update test above reloads them as "0"), so it is told that version, as a run's
        # engine pool does once a restarted engine has the newest weights. The gateway's probe
        # then takes it back; a 503 meanwhile is retried after its Retry-After, as a harness does.
        httpx.post(
            f"{vllm_engine.url}/update_weight_version",
            json={"new_version": version},
            headers=bearer(vllm_engine.api_key),
            timeout=30,
        ).raise_for_status()
        deadline = time.monotonic() + 60
        back = httpx.post(chat, json=short, headers=headers, timeout=120)
        while back.status_code == 503 and time.monotonic() < deadline:
            time.sleep(float(back.headers["retry-after"]))
            back = httpx.post(chat, json=short, headers=headers, timeout=120)
        assert back.status_code == 200, back.text
    calls = stored_calls(store, session["session_id"])
    assert len(calls) == 2 and calls[1].call_id == back.headers["x-roost-call-id"]
