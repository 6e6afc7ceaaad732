"""Qwen3-VL's multimodal RoPE: each token's three positions (temporal, height, width) and the
angles they turn, the one home for the engine and the trainer.

Positions, as transformers' `get_rope_index` computes them for images: text tokens count on
from the last position, equal in all three components. An image's run of placeholder tokens is
its merged patch grid, row by row: temporal at the run's start position, height and width the
start plus the token's row and column; the text after it resumes at the start plus the larger of
the grid's merged height and width. A token's positions depend only on the tokens before it, so
a prefix tree's shared tokens have the same positions on every path, and a prompt's reply
continues at `rope_delta` past its token index.

Angles, as transformers' `Qwen3VLTextRotaryEmbedding` interleaves them: frequency j turns with
the height position when j % 3 == 1 and j < 3 * mrope_section[1], with the width position when
j % 3 == 2 and j < 3 * mrope_section[2], else with the temporal one. A text token's three
components are equal, so its angles are plain RoPE's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def mrope_positions(
    token_ids: Sequence[int], image_token_id: int, image_grids: Sequence[Sequence[int]], spatial_merge: int
) -> torch.Tensor:
    """[3, len(token_ids)] positions; `image_grids[k]` is image k's (t, h, w) patch grid, as the
    processor's `image_grid_thw` gives it, in the order the images' runs appear."""
    ids = torch.as_tensor(list(token_ids), dtype=torch.long)
    positions = torch.zeros(3, len(ids), dtype=torch.long)
    grids = iter(image_grids)
    start, i = 0, 0
    while i < len(ids):
        if ids[i] != image_token_id:
            positions[:, i] = start
            start, i = start + 1, i + 1
            continue
        t, h, w = next(grids, (0, 0, 0))
        h, w = h // spatial_merge, w // spatial_merge
        size = t * h * w
        if size == 0 or i + size > len(ids) or bool((ids[i : i + size] != image_token_id).any()):
            raise ValueError(f"the image placeholder run at token {i} does not match the next image grid {(t, h, w)}")
        grid_t, grid_h, grid_w = torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij")
        positions[:, i : i + size] = torch.stack([grid_t, grid_h, grid_w]).reshape(3, -1) + start
        start, i = start + max(h, w), i + size
    return positions


def rope_delta(positions: torch.Tensor) -> int:
    """How far past its token index the text after a prompt of these [3, n] positions sits: the
    reply's token at index i turns at position i + delta in all three components."""
    return int(positions.max()) + 1 - positions.shape[1] if positions.shape[1] else 0


def mrope_freqs(inv_freq: torch.Tensor, position_ids: torch.Tensor, mrope_section: Sequence[int]) -> torch.Tensor:
    """Angles [..., head_dim / 2] of 3-D positions `position_ids` [3, ...], interleaved by section."""
    component = torch.zeros(inv_freq.shape[0], dtype=torch.long, device=position_ids.device)
    for axis in (1, 2):
        component[axis : 3 * mrope_section[axis] : 3] = axis
    chosen = position_ids.float().movedim(0, -1)[..., component]
    return chosen * inv_freq.float().to(position_ids.device)
