"""How many image tokens each image expands to, and the expansion of `<|image_pad|>` in token ids.

Qwen3-VL's template writes one `<|image_pad|>` per image; the processor replaces the k-th with
grid_t * grid_h * grid_w / merge_size² copies, where the grid is what its image processor makes
of that image (after resizing to its pixel bounds). The engine is sent the expanded ids, so the
gateway, the engines and the trainer must expand exactly as the processor does; this is that
expansion, on ids rather than text. `ImagePlaceholders` counts the same from the folder's
`preprocessor_config.json` alone (transformers' `smart_resize`), without loading a processor:
the gateway's way; `test_tiny_vl` checks the two agree.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from roost.rollout.vision.images import ImageLimits

IMAGE_TOKEN = "<|image_pad|>"


@dataclass(frozen=True)
class ImagePlaceholders:
    patch_size: int
    merge_size: int
    min_pixels: int
    max_pixels: int
    image_token: str = IMAGE_TOKEN
    limits: ImageLimits = field(default_factory=ImageLimits)

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> ImagePlaceholders | None:
        """The model folder's image processor numbers; None for a model without one (text only)."""
        path = Path(folder) / "preprocessor_config.json"
        if not path.is_file():
            return None
        config = json.loads(path.read_text())
        size = config.get("size") or {}
        return cls(
            patch_size=int(config.get("patch_size", 14)),
            merge_size=int(config.get("merge_size", 2)),
            min_pixels=int(size.get("shortest_edge", config.get("min_pixels", 56 * 56))),
            max_pixels=int(size.get("longest_edge", config.get("max_pixels", 28 * 28 * 1280))),
        )

    def count(self, width: int, height: int) -> int:
        """The placeholder ids an image of `width` x `height` pixels takes."""
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

        factor = self.patch_size * self.merge_size
        resized_h, resized_w = smart_resize(
            height, width, factor=factor, min_pixels=self.min_pixels, max_pixels=self.max_pixels
        )
        return int((resized_h // self.patch_size) * (resized_w // self.patch_size) // self.merge_size**2)


class PlaceholderMismatch(ValueError):
    """The ids' image placeholders do not match the images given."""


def image_grids(processor: Any, images: Sequence[Image.Image]) -> list[tuple[int, int, int]]:
    """Each image's (t, h, w) patch grid as the processor's image processor computes it."""
    if not images:
        return []
    grid = processor.image_processor(images=list(images), return_tensors="np")["image_grid_thw"]
    return [(int(t), int(h), int(w)) for t, h, w in grid]


def grid_tokens(grid: Sequence[int], merge_size: int) -> int:
    """How many `<|image_pad|>` ids an image of (t, h, w) patch grid becomes: its patches over merge_size²."""
    t, h, w = grid
    return int(t * h * w) // merge_size**2


def image_token_counts(processor: Any, images: Sequence[Image.Image]) -> list[int]:
    """How many `<|image_pad|>` ids each image becomes (`grid_tokens`)."""
    merge = processor.image_processor.merge_size
    return [grid_tokens(grid, merge) for grid in image_grids(processor, images)]


def expand_image_pads(ids: Sequence[int], image_token_id: int, counts: Sequence[int]) -> list[int]:
    """Replace the k-th single `image_token_id` in `ids` by `counts[k]` copies of it."""
    positions = [index for index, token in enumerate(ids) if token == image_token_id]
    if len(positions) != len(counts):
        raise PlaceholderMismatch(f"the ids hold {len(positions)} image placeholders for {len(counts)} images")
    expanded: list[int] = []
    start = 0
    for position, count in zip(positions, counts, strict=True):
        expanded.extend(ids[start:position])
        expanded.extend([image_token_id] * count)
        start = position + 1
    expanded.extend(ids[start:])
    return expanded


def image_pad_runs(ids: Sequence[int], image_token_id: int) -> list[tuple[int, int]]:
    """The (start, length) of each maximal run of `image_token_id` in already expanded ids, in order."""
    runs: list[tuple[int, int]] = []
    index = 0
    while index < len(ids):
        if ids[index] == image_token_id:
            start = index
            while index < len(ids) and ids[index] == image_token_id:
                index += 1
            runs.append((start, index - start))
        else:
            index += 1
    return runs
