"""The vision side of a Qwen3-VL policy on the Megatron trainer: the checkpoint's vision tower beside
the language model's GPTModel, and what its features do in the forward.

The tower is the engine's (`roost.rollout.engine.vision_tower.VisionTower`: transformers' own
`Qwen3VLVisionModel` with its merger and deepstack mergers), attached to the GPTModel as its
`vision` submodule so that it loads, saves and moves with it (`convert` maps the checkpoint's
`model.visual.*` to `vision.tower.*`). It is frozen by default: its parameters take no gradient
and the forward runs it under `no_grad`, so RL trains the language model only; with
`trainer.freeze_vision_tower: false` the policy turns its gradients on and the forward runs it
with autograd, the features' gradients flowing back from every row they fill. As Qwen3-VL does, each
image's merged features replace the word embeddings of its placeholder rows, and deepstack
feature k is added to those rows after decoder layer k (`deepstack`); each distinct image of a
microbatch (by sha256) runs through the tower once however many paths share it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch

from roost.rollout.engine.model_spec import VisionSpec

from ..prefix_tree import Microbatch, MicrobatchImages


@dataclass(frozen=True)
class PlacedFeatures:
    """A microbatch's image features at their hidden rows (of the flattened [b * s] states)."""

    rows: torch.Tensor
    embeds: torch.Tensor
    """[len(rows), hidden]: replace the word embeddings there."""
    deepstack: tuple[torch.Tensor, ...]
    """Per deepstack layer, [len(rows), hidden]: added there after that decoder layer."""


def attach_vision(model, vision: VisionSpec) -> None:
    """Give a GPTModel its vision tower, frozen (weights uninitialised: `convert` loads them), and the
    interleaved mrope sections its forward turns 3-D positions with."""
    from roost.rollout.engine.vision_tower import VisionTower

    model.vision = VisionTower(vision)
    model.vision.requires_grad_(False)
    model.roost_mrope_section = vision.mrope_section
    model.roost_image_token_id = vision.image_token_id


def microbatch_features(model, microbatch: Microbatch) -> PlacedFeatures | None:
    """The microbatch's image features at their rows (`place_features`); None without images. A
    microbatch whose ids hold the model's image placeholder but that carries no images is refused:
    the placeholders' own embeddings would stand in for the pictures."""
    if microbatch.images is not None:
        return place_features(model, microbatch.images)
    token = getattr(model, "roost_image_token_id", None)
    if token is not None and bool((microbatch.input_ids == token).any()):
        raise ValueError(
            f"the microbatch holds image placeholder tokens (id {token}) but no images: pack it with each "
            "image token keyed by (sha256, index) and the images' pixels (tree_microbatch's keys and images)"
        )
    return None


def place_features(model, images: MicrobatchImages) -> PlacedFeatures:
    """Run each distinct image through the model's tower once and lay its features at the rows
    its tokens hold in the microbatch."""
    tower = getattr(model, "vision", None)
    if tower is None:
        raise ValueError(
            "the microbatch carries images but the model has no vision tower: build it from a "
            "vision-language checkpoint (build_gpt_model attaches the tower when the spec has vision)"
        )
    shas = list(images.pixels)
    trains = any(p.requires_grad for p in tower.parameters())
    with nullcontext() if trains else torch.no_grad():
        features = tower.features([images.pixels[s].pixel_values for s in shas], [images.pixels[s].grid for s in shas])
    device = next(tower.parameters()).device
    rows, embeds, deepstack = [], [], [[] for _ in range(tower.deepstack_layers)]
    for sha, feature in zip(shas, features):
        at, index = images.rows[sha]
        if len(index) and int(index.max()) >= feature.embeds.shape[0]:
            raise ValueError(
                f"image {sha[:12]} has {feature.embeds.shape[0]} merged patches but the microbatch keys its "
                f"token {int(index.max())}: its placeholder run is longer than its grid"
            )
        index = index.to(device)
        rows.append(at.to(device))
        embeds.append(feature.embeds[index])
        for layer, own in enumerate(feature.deepstack):
            deepstack[layer].append(own[index])
    return PlacedFeatures(torch.cat(rows), torch.cat(embeds), tuple(torch.cat(layer) for layer in deepstack))


def scatter_rows(hidden: torch.Tensor, rows: torch.Tensor, values: torch.Tensor, add: bool) -> torch.Tensor:
    """`hidden` ([s, b, h]) with `values` written over (or added to) its flattened [b * s] `rows`."""
    s, b, h = hidden.shape
    flat = hidden.transpose(0, 1).reshape(b * s, h)
    values = values.to(flat.dtype)
    flat = flat.index_add(0, rows, values) if add else flat.index_copy(0, rows, values)
    return flat.reshape(b, s, h).transpose(0, 1).contiguous()


@contextmanager
def deepstack(model, placed: PlacedFeatures | None) -> Iterator[None]:
    """While open, decoder layer k adds deepstack feature k at the image rows of its output."""
    if placed is None:
        yield
        return
    handles = []
    for layer, feature in zip(model.decoder.layers, placed.deepstack):

        def add(_module, _args, output, feature=feature):
            hidden, *rest = output
            return (scatter_rows(hidden, placed.rows, feature, add=True), *rest)

        handles.append(layer.register_forward_hook(add))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
