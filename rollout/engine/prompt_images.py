"""A request's images on the embedded engine: read from SGLang's `image_data`, checked against the
prompt's placeholder runs, and turned into the features and positions its prefill needs.

The prompt arrives expanded (each image already a run of `<|image_pad|>` ids as long as the image's
merged patch grid), as roost's gateway sends it and SGLang takes it. `read_prompt_images` decodes
each data URL under the image limits, runs the checkpoint's image processor and refuses, naming
`image_data[i]`, an image that does not decode or whose run is not as long as its grid; it also
fixes the prompt's mrope positions. `cache_key` is what the slot cache compares: the ids with each
image's run written as its content address, so a prompt with another image at the same placeholder
ids shares no keys and values past that image's first id. `chunk_images` encodes, on the engine
thread, the images a prefill chunk still needs and places their features at its placeholder rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from roost.rollout.engine.model_spec import VisionSpec
from roost.rollout.engine_api.wire import RequestError
from roost.rollout.vision.images import ImageLimits, ImageRejected, decode_image_url
from roost.rollout.vision.mrope import mrope_positions, rope_delta
from roost.rollout.vision.placeholders import grid_tokens, image_pad_runs
from roost.rollout.vision.processor import process_image


@dataclass(frozen=True)
class PromptImage:
    """One image of a prompt: its content address, processor patches and grid, and its placeholder run."""

    sha256: str
    pixel_values: torch.Tensor
    """[t * h * w, patch values], as the image processor flattens them."""
    grid: tuple[int, int, int]
    start: int
    length: int


@dataclass(frozen=True)
class PromptImages:
    """A prompt's images in placeholder order, and the prompt's mrope positions ([3, len(prompt)])."""

    images: tuple[PromptImage, ...]
    positions: torch.Tensor
    delta: int
    """The reply's token at index i turns at position i + delta (`rope_delta`)."""

    def cache_key(self, prompt_ids: Sequence[int]) -> np.ndarray:
        """`prompt_ids` with each image's run replaced by a negative id taken from its content
        address (never a vocabulary id): the slot cache's prefix match stops at a different image."""
        key = np.asarray(prompt_ids, dtype=np.int64).copy()
        for image in self.images:
            key[image.start : image.start + image.length] = -1 - int(image.sha256[:15], 16)
        return key


@dataclass(frozen=True)
class ChunkImages:
    """What a prefill chunk (prompt tokens start.. of one request) takes from its images."""

    positions: torch.Tensor
    """[3, chunk length] mrope positions."""
    mask: torch.Tensor
    """[chunk length] bool: the rows an image feature replaces."""
    embeds: torch.Tensor
    """[mask.sum(), hidden]: the merger's features for those rows, in order."""
    deepstack: tuple[torch.Tensor, ...]
    """Per deepstack layer, [mask.sum(), hidden]: added to those rows after that decoder layer."""


def read_prompt_images(
    image_data: Sequence[str],
    prompt_ids: Sequence[int],
    image_processor,
    vision: VisionSpec,
    limits: ImageLimits = ImageLimits(),
) -> PromptImages:
    """Decode and process each data URL of `image_data` and match it to the prompt's k-th run of
    image placeholder ids; raises RequestError naming the image or the count that is wrong."""
    runs = image_pad_runs(prompt_ids, vision.image_token_id)
    if len(runs) != len(image_data):
        raise RequestError(
            f"the prompt holds {len(runs)} run(s) of image placeholder id {vision.image_token_id} but image_data "
            f"carries {len(image_data)} image(s): send one data URL per run, in order"
        )
    images = []
    for index, (url, (start, length)) in enumerate(zip(image_data, runs, strict=True)):
        if not isinstance(url, str):
            raise RequestError(f"image_data[{index}]: expected a data URL string, got {type(url).__name__}")
        try:
            decoded = decode_image_url(url, limits)
        except ImageRejected as exc:
            raise RequestError(f"image_data[{index}]: {exc}") from None
        pixel_values, grid = process_image(image_processor, decoded.image)
        tokens = grid_tokens(grid, vision.spatial_merge_size)
        if tokens != length:
            raise RequestError(
                f"image_data[{index}] is {decoded.image.width}x{decoded.image.height} pixels, which the model's "
                f"processor makes {tokens} image tokens, but its placeholder run at token {start} is {length} "
                "long: expand each image's placeholder with the checkpoint's own processor"
            )
        images.append(PromptImage(decoded.sha256, pixel_values, grid, start, length))
    positions = mrope_positions(prompt_ids, vision.image_token_id, [i.grid for i in images], vision.spatial_merge_size)
    return PromptImages(tuple(images), positions, rope_delta(positions))


def text_positions(start: int, length: int) -> torch.Tensor:
    """[3, length] mrope positions of text tokens at indices start.. with no image before them."""
    return torch.arange(start, start + length).expand(3, length)


def chunk_images(images: PromptImages, start: int, end: int, tower) -> ChunkImages:
    """The features of the prompt's tokens start..end-1: only the images whose run reaches past
    `start` (the rest is in the reused keys and values) go through `tower` (`VisionTower`)."""
    mask = torch.zeros(end - start, dtype=torch.bool)
    needed = [image for image in images.images if image.start + image.length > start]
    embeds: list[torch.Tensor] = []
    deepstack: list[list[torch.Tensor]] = [[] for _ in range(tower.deepstack_layers)]
    for image, features in zip(needed, tower.encode([i.pixel_values for i in needed], [i.grid for i in needed])):
        first = max(image.start, start)
        mask[first - start : image.start + image.length - start] = True
        skip = first - image.start  # the run's head already in the reused prefix
        embeds.append(features.embeds[skip:])
        for layer, feature in enumerate(features.deepstack):
            deepstack[layer].append(feature[skip:])
    hidden = tower.out_hidden_size
    return ChunkImages(
        positions=images.positions[:, start:end],
        mask=mask,
        embeds=torch.cat(embeds) if embeds else torch.zeros(0, hidden),
        deepstack=tuple(torch.cat(rows) if rows else torch.zeros(0, hidden) for rows in deepstack),
    )
