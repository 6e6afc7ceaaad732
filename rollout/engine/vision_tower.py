"""A Qwen3-VL checkpoint's vision tower on the embedded engine: patches in, image features out.

The tower is transformers' own `Qwen3VLVisionModel` (patch embedding, interpolated learned
positions, 2-D rotary blocks, the 2x2 patch merger and the deepstack mergers) built from the
checkpoint's `vision_config`: its features are the reference's by construction, and the engine
owns what is its own business, placing them in a prompt (`prompt_images`) and the language model
that reads them (`model`). Its weights load from the checkpoint's `model.visual.*` tensors
(`checkpoint_names`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import nn

from roost.rollout.engine.model_spec import VisionSpec
from roost.rollout.vision.placeholders import grid_tokens

T = TypeVar("T")
# Checkpoint name prefix → engine module prefix (Qwen3VLForConditionalGeneration's layout).
CHECKPOINT_PREFIXES = (("model.language_model.", "model."), ("model.visual.", "visual.tower."))


def engine_names(tensors: dict[str, T]) -> dict[str, T]:
    """A Qwen3-VL checkpoint's tensors (or their shapes) under the engine's module names (others pass unchanged)."""
    renamed = {}
    for name, tensor in tensors.items():
        for prefix, engine_prefix in CHECKPOINT_PREFIXES:
            if name.startswith(prefix):
                name = engine_prefix + name[len(prefix) :]
                break
        renamed[name] = tensor
    return renamed


@dataclass(frozen=True)
class ImageFeatures:
    """One image's features: what replaces its placeholder rows, and what each deepstack layer adds there."""

    embeds: torch.Tensor
    """[tokens, hidden]"""
    deepstack: tuple[torch.Tensor, ...]
    """Per deepstack layer, [tokens, hidden]."""


class VisionTower(nn.Module):
    def __init__(self, vision: VisionSpec):
        super().__init__()
        from transformers import Qwen3VLVisionConfig
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

        self.config = Qwen3VLVisionConfig(**vision.config)
        self.tower = Qwen3VLVisionModel(self.config)
        self.merge_size = vision.spatial_merge_size
        self.deepstack_layers = vision.deepstack_layers
        self.out_hidden_size = self.config.out_hidden_size

    def rebuild_buffers(self) -> None:
        """Recompute the rotary frequencies, which checkpoints do not hold (after a build on `meta`)."""
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionRotaryEmbedding

        self.tower.rotary_pos_emb = Qwen3VLVisionRotaryEmbedding(self.config)

    @torch.inference_mode()
    def encode(
        self, pixel_values: Sequence[torch.Tensor], grids: Sequence[tuple[int, int, int]]
    ) -> list[ImageFeatures]:
        """Each image's features, the images run through the tower together (inference mode)."""
        return self.features(pixel_values, grids)

    def features(
        self, pixel_values: Sequence[torch.Tensor], grids: Sequence[tuple[int, int, int]]
    ) -> list[ImageFeatures]:
        """`encode` under the caller's autograd mode (the trainer's forward)."""
        if not grids:
            return []
        dtype = next(self.tower.parameters()).dtype
        device = next(self.tower.parameters()).device
        pixels = torch.cat(list(pixel_values)).to(device=device, dtype=dtype)
        out = self.tower(pixels, grid_thw=torch.tensor(grids, device=device), return_dict=True)
        sizes = [grid_tokens(grid, self.merge_size) for grid in grids]
        embeds = torch.split(out.pooler_output, sizes)
        deepstack = [torch.split(feature, sizes) for feature in out.deepstack_features]
        return [ImageFeatures(embeds[i], tuple(layer[i] for layer in deepstack)) for i in range(len(grids))]
