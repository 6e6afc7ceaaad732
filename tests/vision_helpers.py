"""Shared by the vision tests: a seeded noise image, a gateway over the scripted tiny VLM, and
transformers' Qwen3-VL logprobs as the oracle."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.engine.tiny_model import TINY_VL_CONFIG
from roost.rollout.vision.processor import load_processor
from roost.tests.rollout.gateway_helpers import EngineSpy, start_gateway

IMAGE_PAD = TINY_VL_CONFIG["image_token_id"]


def noise_png(seed: int) -> bytes:
    """A 96×64 PNG of seeded noise (another seed, another image of the same size)."""
    pixels = np.random.default_rng(seed).integers(0, 256, (64, 96, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def transformers_logprobs(reference, folder, tokens: list[int], scored: list[int], picture: Image.Image):
    """`Qwen3VLForConditionalGeneration`'s logprob of each token at `scored` in `tokens` (one image)."""
    pixels = load_processor(folder).image_processor(images=[picture], return_tensors="pt")
    ids = torch.tensor([tokens])
    with torch.no_grad():
        logits = reference(
            input_ids=ids,
            pixel_values=pixels["pixel_values"],
            image_grid_thw=pixels["image_grid_thw"],
            mm_token_type_ids=(ids == IMAGE_PAD).int(),
        ).logits[0]
    at = torch.tensor(scored)
    return torch.log_softmax(logits.float(), -1)[at - 1, ids[0, at]]


@contextmanager
def scripted_vision_gateway(folder: Path, *, spy: bool = False, **gateway_args) -> Iterator[tuple]:
    """(server, spy): a gateway recording into `folder`/trajectories.sqlite over a scripted tiny-vl
    engine that answers every call "Noise.", behind an `EngineSpy` when `spy` (else spy is None)."""
    script = folder / "script.json"
    script.write_text(json.dumps({"rules": [{"match": None, "reply": "Noise."}]}))
    with ExitStack() as stack:
        engine_url = stack.enter_context(EngineProcess("tiny-vl", scripted=True, script=script))
        watcher = stack.enter_context(EngineSpy(engine_url)) if spy else None
        server = start_gateway(watcher.url if watcher else engine_url, folder / "trajectories.sqlite", **gateway_args)
        try:
            yield server, watcher
        finally:
            server.stop()
