"""The trainer's vision test batch, shared by the one-process tests and the TP/DP workers: a
GRPO-like group of replies to one image question on `tiny-vl`, and a fourth sample asking about
another image with the same ids."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from roost.rollout.engine.model_spec import ModelSpec
from roost.rollout.vision.mrope import mrope_positions
from roost.rollout.vision.placeholders import expand_image_pads, image_token_counts
from roost.rollout.vision.processor import load_processor
from roost.tests.vision_helpers import IMAGE_PAD
from roost.trainer.prefix_tree import ImagePixels

REPLIES = [[785, 2168, 374, 13], [785, 2168, 5868], [32, 6802, 13, 151645], [785, 2168, 374, 13]]
SEEN = ["sha-1", "sha-1", "sha-1", "sha-2"]
IM_END, NEWLINE = 151645, 198


def noise_image(seed: int) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (96, 128, 3), dtype=np.uint8))


def png_bytes(picture: Image.Image) -> bytes:
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


def image_group(vl_path: Path) -> tuple:
    """(sequences, scored positions, keys, mrope positions, images by sha, each sample's image)."""
    spec = ModelSpec.from_folder(vl_path)
    processor = load_processor(vl_path)
    pictures = {f"sha-{seed}": noise_image(seed) for seed in (1, 2)}
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    counts = image_token_counts(processor, [pictures["sha-1"]])
    prompt = expand_image_pads(processor.tokenizer(text)["input_ids"], IMAGE_PAD, counts)
    images = {}
    for sha, picture in pictures.items():
        out = processor.image_processor(images=[picture], return_tensors="pt")
        images[sha] = ImagePixels(out["pixel_values"], tuple(int(v) for v in out["image_grid_thw"][0]))
    sequences, keys, positions = [], [], []
    for reply, sha in zip(REPLIES, SEEN):
        ids = prompt + reply
        k = 0
        own_keys: list[object] = []
        for token in ids:
            own_keys.append((sha, k) if token == IMAGE_PAD else token)
            k += token == IMAGE_PAD
        sequences.append(ids)
        keys.append(own_keys)
        positions.append(mrope_positions(ids, IMAGE_PAD, [images[sha].grid], spec.vision.spatial_merge_size))
    scored = [list(range(len(prompt), len(s))) for s in sequences]
    return sequences, scored, keys, positions, images, [pictures[sha] for sha in SEEN]


def policy_samples(group: tuple) -> tuple[list[Any], dict[str, bytes]]:
    """The group as the RL trainer takes it: samples naming their images by sha256, and the
    images' bytes by sha256 (as the store holds them, for `MegatronPolicy.use_images`)."""
    from roost.rollout.store.samples import Sample
    from roost.rollout.vision.images import content_address

    sequences, scored, *_, pictures = group
    data = [png_bytes(picture) for picture in pictures]
    samples = []
    for k, (sequence, positions, raw) in enumerate(zip(sequences, scored, data)):
        prompt, reply = sequence[: positions[0]], sequence[positions[0] :]
        sample = Sample.from_turns(
            [(prompt, reply, [-1.0] * len(reply))], session_id=f"s{k}", group_id="g", reward=float(k % 2)
        )
        sample.images = [content_address(raw)]
        samples.append(sample)
    return samples, {content_address(raw): raw for raw in data}


def two_turn_samples(vl_path: Path) -> tuple[list[Any], dict[str, bytes]]:
    """Two episodes of two turns, each turn asking about an image of its own (the first turn's
    image, then another of the same size): samples naming both images, rewards 0 and 1, and the
    images' bytes by sha256."""
    from roost.rollout.store.samples import Sample
    from roost.rollout.vision.images import content_address

    sequences, scored, *_ = image_group(vl_path)
    prompt = sequences[0][: scored[0][0]]
    data = [png_bytes(noise_image(seed)) for seed in (1, 2)]
    shas = [content_address(raw) for raw in data]
    again = [IM_END, NEWLINE, *prompt]  # the next user turn: the same question about the second image
    samples = []
    for k, (first, second) in enumerate([(REPLIES[0], REPLIES[1]), (REPLIES[2][:-1], REPLIES[3])]):
        turns = [(prompt, first, [-1.0] * len(first)), (again, second, [-1.0] * len(second))]
        sample = Sample.from_turns(turns, session_id=f"t{k}", group_id="turns", reward=float(k))
        sample.images = list(shas)
        samples.append(sample)
    return samples, dict(zip(shas, data))
