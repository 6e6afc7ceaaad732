"""Weights sent to roost's engine over HTTP, in chunks: the wire types and the chunk format.

No shared disk is needed: the sender declares every tensor it will send (name, shape, dtype),
sends them as safetensors bytes a chunk at a time, and commits; the engine swaps them in only
at the commit, so a half-sent update never serves.

    POST /roost/weights/begin                 BeginUpload (JSON)      -> BeginAnswer
    POST /roost/weights/{update_id}/chunk     safetensors bytes       -> ChunkAnswer
    POST /roost/weights/{update_id}/commit    (empty)                 -> CommitAnswer
    POST /roost/weights/{update_id}/abort     (empty)                 -> {"success", "message"}

Base weights go under Hugging Face names (`model.layers.0.self_attn.q_proj.weight`); a LoRA
adapter under PEFT's (`base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`), with
its `adapter_config.json` as `adapter.config`. Both ends import this module: the engine parses
with these models, the trainer's sync builds its requests with them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

CHUNK_CONTENT_TYPE = "application/octet-stream"
DEFAULT_CHUNK_BYTES = 64 * 1024 * 1024
"""What the sender packs into one chunk (a larger tensor goes alone)."""
MAX_CHUNK_BYTES = 1024 * 1024 * 1024
"""The most the engine reads as one chunk."""
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DtypeName = Literal["float32", "bfloat16", "float16"]


class TensorMeta(BaseModel):
    model_config = ConfigDict(extra="forbid")

    shape: list[int]
    dtype: DtypeName

    @classmethod
    def of(cls, tensor: torch.Tensor) -> TensorMeta:
        return cls(shape=list(tensor.shape), dtype=dtype_name(tensor.dtype))


class AdapterUpload(BaseModel):
    """The update is a LoRA adapter, served as `lora_name` at the commit."""

    model_config = ConfigDict(extra="forbid")

    lora_name: str = Field(min_length=1)
    config: dict[str, Any]
    """The adapter's `adapter_config.json` (PEFT's `LoraConfig`)."""
    load_inplace: bool = True
    """Replace a loaded adapter of that name (false: a taken name is refused at the commit)."""


class BeginUpload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tensors: dict[str, TensorMeta] = Field(min_length=1)
    """Every tensor the chunks will carry: the commit needs them all."""
    weight_version: str | None = None
    """The version served after the commit; unset: the current one plus one."""
    adapter: AdapterUpload | None = None
    """Set: the tensors are this LoRA adapter's (PEFT's names); unset: the base weights (all of them)."""


class BeginAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    update_id: str
    expected: int
    """How many tensors the commit waits for."""
    superseded: str | None = None
    """The id of an update left open before this one, dropped unsent."""


class ChunkAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    received: int
    remaining: int


class CommitAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    success: bool
    message: str
    weight_version: str


def dtype_name(dtype: torch.dtype) -> str:
    for name, known in DTYPES.items():
        if known == dtype:
            return name
    raise ValueError(f"dtype {dtype} cannot be sent; cast to one of {', '.join(DTYPES)}")


def manifest(tensors: Mapping[str, torch.Tensor]) -> dict[str, TensorMeta]:
    return {name: TensorMeta.of(tensor) for name, tensor in tensors.items()}


def chunked(tensors: Mapping[str, torch.Tensor], budget_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[list[str]]:
    """The tensor names in groups of at most `budget_bytes` each (a larger tensor alone), in order."""
    group: list[str] = []
    size = 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if group and size + nbytes > budget_bytes:
            yield group
            group, size = [], 0
        group.append(name)
        size += nbytes
    if group:
        yield group


def encode_chunk(tensors: Mapping[str, torch.Tensor]) -> bytes:
    from safetensors.torch import save

    return save({name: t.detach().contiguous().cpu() for name, t in tensors.items()})


def decode_chunk(body: bytes) -> dict[str, torch.Tensor]:
    """The tensors of one chunk; ValueError when the bytes are not a safetensors file."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        return load(body)
    except (SafetensorError, RuntimeError, ValueError) as exc:
        raise ValueError(f"the chunk is not safetensors bytes (safetensors.torch.save): {exc}") from exc
