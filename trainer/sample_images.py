"""A vision-language batch's images for packing: each sample's image tokens keyed by their image,
its 3-D mrope positions, and each image's pixels, processed once per content address.

A `Sample` names its images (`Sample.images`, the sha256 of each run of image placeholder ids, in
token order); their bytes are the store's (`GET /images/{sha256}`), handed to `SampleImages` by
content address. The pixels come from the checkpoint's image processor, the one the engine runs,
so the trainer sees the features the engine sampled with.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from roost.rollout.engine.model_spec import VisionSpec
from roost.rollout.store.samples import Sample
from roost.rollout.vision.images import ImageLimits, decode_image_bytes
from roost.rollout.vision.mrope import mrope_positions
from roost.rollout.vision.placeholders import grid_tokens, image_pad_runs
from roost.rollout.vision.processor import process_image

from .prefix_tree import ImagePixels, PackingError

_NO_LIMIT = 1 << 62


@dataclass(frozen=True)
class PackingImages:
    """What `tree_microbatch` and `flat_microbatch` take for a batch: per sample its keys and
    positions (None for a text-only batch), and the pixels of every image they name."""

    keys: list[list[Hashable]] | None
    positions: list[torch.Tensor] | None
    pixels: dict[str, ImagePixels]


@dataclass
class SampleImages:
    """Turns samples' image hashes into `PackingImages`, with the image bytes it was given."""

    checkpoint: Path
    vision: VisionSpec
    data: dict[str, bytes] = field(default_factory=dict)
    """Image file bytes by sha256 (`use`)."""
    _pixels: dict[str, ImagePixels] = field(default_factory=dict)
    _processor: object | None = None

    def use(self, images: Mapping[str, bytes]) -> None:
        """Hold these images' bytes (by sha256) for the samples that name them, in place of those
        held before (a step's images: the processed pixels of the others are dropped too)."""
        self.data = dict(images)
        self._pixels = {sha: pixels for sha, pixels in self._pixels.items() if sha in self.data}

    def pack_inputs(self, samples: Sequence[Sample]) -> PackingImages:
        """Keys, mrope positions and pixels for `samples`; raises PackingError naming a sample whose
        image runs do not match its images or an image whose bytes were not given."""
        if not any(s.images for s in samples) and not any(self.vision.image_token_id in s.tokens for s in samples):
            return PackingImages(None, None, {})
        keys, positions, used = [], [], {}
        for number, sample in enumerate(samples):
            runs = image_pad_runs(sample.tokens, self.vision.image_token_id)
            if len(runs) != len(sample.images):
                raise PackingError(
                    f"sample {number} (session {sample.session_id}) holds {len(runs)} run(s) of image placeholder "
                    f"id {self.vision.image_token_id} but names {len(sample.images)} image(s): its images were not recorded"
                )
            own: list[Hashable] = list(sample.tokens)
            for sha, (start, length) in zip(sample.images, runs):
                used[sha] = self.pixels(sha)
                tokens = grid_tokens(used[sha].grid, self.vision.spatial_merge_size)
                if tokens != length:
                    raise PackingError(
                        f"sample {number}: image {sha[:12]} makes {tokens} image tokens but its run at token {start} "
                        f"is {length} long: the image is not the one the engine saw"
                    )
                own[start : start + length] = [(sha, k) for k in range(length)]
            keys.append(own)
            grids = [used[sha].grid for sha in sample.images]
            positions.append(
                mrope_positions(sample.tokens, self.vision.image_token_id, grids, self.vision.spatial_merge_size)
            )
        return PackingImages(keys, positions, used)

    def pixels(self, sha: str) -> ImagePixels:
        """One image's pixels from its bytes, processed once."""
        if sha not in self._pixels:
            raw = self.data.get(sha)
            if raw is None:
                raise PackingError(
                    f"image {sha} of a sample was not given to the trainer: fetch its bytes from the store "
                    "(GET /images/{sha256}) and pass them to the policy's use_images before the step"
                )
            if self._processor is None:
                from roost.rollout.vision.processor import load_image_processor

                self._processor = load_image_processor(self.checkpoint)
            # the gateway checked the image against its own limits when it stored it
            image = decode_image_bytes(raw, "", ImageLimits(max_bytes=len(raw), max_pixels=_NO_LIMIT)).image
            self._pixels[sha] = ImagePixels(*process_image(self._processor, image))
        return self._pixels[sha]
