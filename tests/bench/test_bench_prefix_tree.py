"""`roost bench prefix-tree --vision`'s case packs as the trainer packs a screenshot group: the
screenshot's tokens once in the tree, once per rollout flat, its pixels once per microbatch
either way, with 3-D positions that agree on the shared prompt (the step itself, and the
logprobs' equality, are the bench's to measure and test_vision_language.py's to check)."""

from __future__ import annotations

import random

from roost.bench.prefix_tree import SCREENSHOT_GRID, vision_case, vision_inputs
from roost.trainer.prefix_tree import build_microbatches

VOCAB = 512


def test_the_vision_case_shares_its_screenshot_prompt_in_the_tree_only():
    data = vision_case(random.Random(0), VOCAB, rollouts=4, text=20, answer=6)
    inputs = vision_inputs(data, VOCAB, seed=0)
    sequences = [tokens for tokens, _ in data]
    scored = [[i for i, m in enumerate(mask) if m] for _, mask in data]
    image_tokens = SCREENSHOT_GRID[1] * SCREENSHOT_GRID[2] // 4
    assert all(tokens.count(VOCAB - 3) == image_tokens for tokens in sequences)
    packed = {}
    for layout in ("tree", "flat"):
        (batch,) = build_microbatches(
            sequences,
            scored,
            ["g"] * len(data),
            10_000,
            layout,
            keys=inputs.keys,
            mrope_positions=inputs.positions,
            images=inputs.images,
        )
        packed[layout] = batch
        assert list(batch.images.pixels) == ["screenshot"]  # one image to encode
    prompt = len(sequences[0]) - 6
    assert packed["tree"].num_tokens == prompt + 4 * 6
    assert packed["flat"].num_tokens == 4 * len(sequences[0])
    rows_tree, _ = packed["tree"].images.rows["screenshot"]
    rows_flat, _ = packed["flat"].images.rows["screenshot"]
    assert len(rows_tree) == image_tokens and len(rows_flat) == 4 * image_tokens
