"""vLLM serving the tiny VLM (`tiny-vl`, Qwen3-VL architecture) through the gateway: image calls on
the chat and Messages wires go to vLLM's token-in `/inference/v1/generate` with the image as a
content part, are recorded with the prompt ids vLLM saw (each image's placeholder run expanded to
its token count) and the image once, a second turn resending the image extends the first call's
path, and vLLM's logprobs of what it sampled equal transformers' Qwen3-VL on the same ids and
image (≤ 1e-4). An image too many for vLLM's per-prompt limit is a 400 naming the part.

vLLM runs its own Qwen3-VL model code and processor; its torchvision is PyPI's (a CUDA build)
without its compiled operators (roost's `vllm_torchvision` hook, installed by `make vllm`).
Skipped when no vLLM virtualenv is found, except with ROOST_REQUIRE_VLLM=1 (CI), where that fails.
"""

from __future__ import annotations

import asyncio
import base64
import io
import shutil
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
import torch
from PIL import Image

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.engine.tiny_model import tiny_model_dir
from roost.rollout.store.reader import TrajectoryReader
from roost.tests.rollout.gateway_helpers import new_session, start_gateway, stored_calls
from roost.tests.vision_helpers import IMAGE_PAD, noise_png, transformers_logprobs
from roost.trainer.weight_sync import sync_weights

pytestmark = pytest.mark.vllm

VLLM_ARGS = "--optimization-level 0 --enforce-eager --max-model-len 4096 --limit-mm-per-prompt.image 2"
PNG = noise_png(3)
B64 = base64.b64encode(PNG).decode()
URL = "data:image/png;base64," + B64


@pytest.fixture(scope="module")
def vision_gateway(vllm_py, tmp_path_factory):
    """(server, store, engine): a gateway over vLLM serving tiny-vl."""
    engine = EngineProcess("tiny-vl", extra_args=["--backend", "vllm", "--vllm-args", VLLM_ARGS], startup_timeout_s=900)
    with engine:
        store = tmp_path_factory.mktemp("store") / "trajectories.sqlite"
        server = start_gateway(engine.url, store, backend="vllm", engine_key=engine.api_key, model="tiny-vl")
        yield server, store, engine
        server.stop()


def chat_turns(session: dict) -> None:
    client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"], max_retries=0)
    history = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": URL}}, {"type": "text", "text": "What is it?"}],
        }
    ]
    first = client.chat.completions.create(model="tiny-vl", messages=history, max_tokens=6, seed=1)
    history += [first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "Sure?"}]
    chunks = client.chat.completions.create(model="tiny-vl", messages=history, max_tokens=6, seed=2, stream=True)
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) >= 1  # streamed


def messages_turns(session: dict) -> None:
    client = anthropic.Anthropic(
        base_url=session["base_url"].removesuffix("/v1"), api_key=session["key"], max_retries=0
    )
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}}
    history: list[dict] = [{"role": "user", "content": [image, {"type": "text", "text": "What is it?"}]}]
    first = client.messages.create(model="tiny-vl", max_tokens=6, messages=history)
    history += [{"role": "assistant", "content": first.content}, {"role": "user", "content": "Sure?"}]
    client.messages.create(model="tiny-vl", max_tokens=6, messages=history)


@pytest.mark.parametrize("turns", [chat_turns, messages_turns], ids=["chat", "messages"])
def test_vllm_serves_image_calls_recorded_as_it_saw_them(vision_gateway, turns):
    server, store, _ = vision_gateway
    session = new_session(server)
    turns(session)
    first, second = stored_calls(store, session["session_id"])
    assert (first.kind, second.kind) == ("root", "extend") and second.parent_call_id == first.call_id
    path = list(first.prompt_ids) + list(first.sampled_ids)
    assert list(second.prompt_ids[: len(path)]) == path  # the resent image: the same ids, no re-render
    [span] = first.images
    assert second.images == first.images
    run = list(first.prompt_ids)[span.offset : span.offset + span.count]
    assert span.count == 6 and run == [IMAGE_PAD] * 6  # 96x64 pixels: 3x2 merged patches
    with TrajectoryReader(store) as reader:
        assert reader.image(span.sha256).data == PNG
    for call in (first, second):
        assert call.sampled_ids and any(lp < 0.0 for lp in call.sampled_logprobs)


def assert_logprobs_are_the_checkpoints(calls: list, folder: Path) -> None:
    """Each call's recorded logprobs equal transformers' Qwen3-VL from `folder` on its ids and the image."""
    from transformers import Qwen3VLForConditionalGeneration

    reference = Qwen3VLForConditionalGeneration.from_pretrained(folder, torch_dtype=torch.float32).eval()
    picture = Image.open(io.BytesIO(PNG)).convert("RGB")
    for call in calls:
        tokens = list(call.prompt_ids) + list(call.sampled_ids)
        scored = list(range(len(call.prompt_ids), len(tokens)))
        want = transformers_logprobs(reference, folder, tokens, scored, picture)
        assert (torch.tensor(list(call.sampled_logprobs)) - want).abs().max() <= 1e-4


def test_vllm_logprobs_equal_transformers_on_the_recorded_ids(vision_gateway):
    server, store, _ = vision_gateway
    session = new_session(server)
    chat_turns(session)
    assert_logprobs_are_the_checkpoints(stored_calls(store, session["session_id"]), tiny_model_dir(variant="tiny-vl"))


def perturbed_vlm(folder: Path) -> Path:
    """tiny-vl with every weight moved, the vision tower's and the language model's."""
    from safetensors.torch import load_file, save_file

    source = tiny_model_dir(variant="tiny-vl")
    shutil.copytree(source, folder)
    gen = torch.Generator().manual_seed(2)
    weights = {
        n: t + 0.05 * torch.randn(t.shape, generator=gen) for n, t in load_file(source / "model.safetensors").items()
    }
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def test_new_weights_for_tower_and_language_model_are_what_vllm_serves(vision_gateway, tmp_path):
    server, store, engine = vision_gateway
    folder = perturbed_vlm(tmp_path / "step-1")
    before, after = new_session(server), new_session(server)
    chat_turns(before)
    try:
        sync = sync_weights(
            engine.url,
            folder,
            weight_version="1",
            engine_key=engine.api_key,
            gateway_url=server.url,
            admin_key=server.admin_key,
        )
        assert asyncio.run(sync).weight_version == "1"
        chat_turns(after)
    finally:
        asyncio.run(
            sync_weights(engine.url, tiny_model_dir(variant="tiny-vl"), weight_version="0", engine_key=engine.api_key)
        )
    old, new = stored_calls(store, before["session_id"]), stored_calls(store, after["session_id"])
    assert {c.weight_version for c in new} == {"1"} and "1" not in {c.weight_version for c in old}
    assert_logprobs_are_the_checkpoints(new, folder)
    assert max(abs(a - b) for a, b in zip(old[0].sampled_logprobs, new[0].sampled_logprobs)) > 0.01


def test_more_images_than_vllms_limit_are_a_400_with_its_reason_and_nothing_recorded(vision_gateway):
    """vLLM's own limit (`--limit-mm-per-prompt.image 2`) refuses a third image: the harness gets
    vLLM's reason as a 400, nothing is recorded, and the session's next call is served. (The
    gateway's `max_images_per_call`, set to the same limit, refuses earlier and names the part:
    tests/rollout/test_gateway_vision_engine.py.)"""
    server, store, _ = vision_gateway
    session = new_session(server)
    content = [{"type": "image_url", "image_url": {"url": URL}}] * 3 + [{"type": "text", "text": "Which?"}]
    resp = httpx.post(
        f"{session['base_url']}/chat/completions",
        json={"model": "tiny-vl", "messages": [{"role": "user", "content": content}], "max_tokens": 2},
        headers={"Authorization": f"Bearer {session['key']}"},
    )
    assert resp.status_code == 400, resp.text
    assert "At most 2 image(s) may be provided in one prompt" in resp.json()["error"]["message"]
    assert stored_calls(store, session["session_id"]) == []
    chat_turns(session)
    assert len(stored_calls(store, session["session_id"])) == 2
