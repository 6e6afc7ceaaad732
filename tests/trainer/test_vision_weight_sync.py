"""Weight sync into an embedded engine serving a vision-language model (tiny-vl): the trainer's
checkpoint names Qwen3-VL's tensors `model.language_model.*` and `model.visual.*` (and keeps the
vocabulary size in `text_config`); the engine takes them from a folder and over HTTP alike, and
then serves the new weights."""

from __future__ import annotations

import shutil

import httpx
import pytest
import torch
from safetensors.torch import save_file

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.engine.tiny_model import resolve_model
from roost.rollout.engine.weights import read_checkpoint
from roost.trainer.weight_sync import sync_weights

PROMPT = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]  # <|im_start|>user\nHello<|im_end|>...


@pytest.fixture(scope="module")
def engine():
    """This module's own engine: its weights get replaced."""
    process = EngineProcess("tiny-vl")
    with process:
        yield process


def perturbed_checkpoint(folder, scale: float) -> tuple[dict[str, torch.Tensor], object]:
    """tiny-vl's tensors (Hugging Face names) with the language model's final norm scaled, written
    beside its config and tokenizer."""
    source = resolve_model("tiny-vl")
    shutil.copytree(source, folder)
    tensors = read_checkpoint(source)
    assert any(name.startswith("model.visual.") for name in tensors)
    tensors["model.language_model.norm.weight"] = tensors["model.language_model.norm.weight"] * scale
    save_file(tensors, str(folder / "model.safetensors"))
    return tensors, folder


async def greedy_logprobs(url: str) -> list[float]:
    async with httpx.AsyncClient(timeout=60) as http:
        answer = await http.post(
            f"{url}/generate",
            json={
                "input_ids": PROMPT,
                "sampling_params": {"max_new_tokens": 3, "temperature": 0.0},
                "return_logprob": True,
            },
        )
    assert answer.status_code == 200, answer.text
    return [row[0] for row in answer.json()["meta_info"]["output_token_logprobs"]]


async def test_a_vision_language_checkpoint_syncs_from_disk_and_over_http(engine, tmp_path):
    before = await greedy_logprobs(engine.url)
    _, folder = perturbed_checkpoint(tmp_path / "disk", 1.5)
    result = await sync_weights(engine.url, folder, weight_version="1", engine_key=engine.api_key)
    assert result.weight_version == "1"
    on_disk = await greedy_logprobs(engine.url)
    assert on_disk != before

    tensors, _ = perturbed_checkpoint(tmp_path / "http", 1.5)
    result = await sync_weights(
        engine.url, tensors=tensors, transport="http", weight_version="2", engine_key=engine.api_key
    )
    assert result.weight_version == "2"
    assert await greedy_logprobs(engine.url) == pytest.approx(on_disk, abs=1e-6)
