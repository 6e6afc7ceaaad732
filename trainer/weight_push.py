"""The `http` transport of a weight sync: the tensors themselves go to roost's engine, in chunks
(`roost.rollout.engine_api.weight_sender`), so trainer and engine need no shared disk.

The tensors are the state dict the trainer holds (`MegatronPolicy.hf_state()` or
`adapter_state()`), or a folder's, read on the trainer's machine. Only roost's embedded engine
takes them this way; SGLang and vLLM take a folder (`disk`) or their own transfer APIs
(`roost.rollout.engine_api.sglang_weights`, `vllm_weights`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import torch

from roost.rollout.engine.weights import read_checkpoint
from roost.rollout.engine_api import weight_sender
from roost.rollout.engine_api.sglang_client import EngineError, SGLangClient
from roost.rollout.engine_api.weight_upload import DEFAULT_CHUNK_BYTES, DTYPES, AdapterUpload
from roost.rollout.lora import CONFIG_FILE, Adapter, config_dict, load_adapter

from .hf_checkpoint import CheckpointMismatch

Transport = Literal["disk", "http"]
TRANSPORTS: tuple[str, ...] = ("disk", "http")
EMBEDDED = "roost-embedded"


class PushRefused(RuntimeError):
    """The engine did not take the tensors (it serves the old weights)."""


def tensor_bytes(tensors: Mapping[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


async def folder_tensors(folder: str | Path) -> dict[str, torch.Tensor]:
    """A Hugging Face folder's tensors, read off the event loop."""
    return await asyncio.to_thread(read_checkpoint, folder)


async def folder_adapter(folder: str | Path) -> tuple[Adapter, dict[str, Any]]:
    """A PEFT folder's adapter and its `adapter_config.json` as written."""
    adapter = await asyncio.to_thread(load_adapter, folder)
    config = json.loads(await asyncio.to_thread((Path(folder) / CONFIG_FILE).read_text))
    return adapter, config


def adapter_config(adapter: Adapter) -> dict[str, Any]:
    """An in-memory adapter's `adapter_config.json`, as PEFT writes it."""
    return config_dict(adapter.spec, adapter.base_model)


def check_tensors(tensors: Mapping[str, torch.Tensor], model_info: dict[str, Any]) -> None:
    """Raise `CheckpointMismatch` when the state dict's vocabulary is not the engine's."""
    embed = tensors.get("model.embed_tokens.weight")
    vocab = model_info.get("vocab_size")
    if embed is not None and vocab is not None and embed.shape[0] != int(vocab):
        raise CheckpointMismatch(
            f"the weights have {embed.shape[0]} embedding rows but the engine serves vocab_size {vocab}; "
            "train from the checkpoint the engine was started with"
        )


def as_engine_dtype(tensors: Mapping[str, torch.Tensor], model_info: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The tensors in the dtype the engine serves (a bfloat16 engine of a float32 trainer)."""
    dtype = DTYPES.get(str(model_info.get("dtype")))
    return {name: t if dtype is None or t.dtype == dtype else t.to(dtype) for name, t in tensors.items()}


async def require_embedded(engine: SGLangClient) -> None:
    """Raise `PushRefused` unless `engine` is roost's embedded engine (the one with the route)."""
    try:
        kind = (await engine.server_info()).get("engine")
    except EngineError as exc:
        raise PushRefused(f"could not ask {engine.base_url} what engine it is: {exc}") from exc
    if kind != EMBEDDED:
        raise PushRefused(
            f"weight_sync: http sends tensors to roost's embedded engine only; {engine.base_url} is "
            f"{kind or 'an SGLang server'}: use weight_sync: disk (a folder the engine can read)"
        )


async def stage(
    engine: SGLangClient,
    tensors: Mapping[str, torch.Tensor],
    *,
    weight_version: str | None,
    adapter: AdapterUpload | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> str:
    """Send the tensors uncommitted (the engine serves on); the update's id. `PushRefused` if refused."""
    try:
        return await weight_sender.stage(
            engine, tensors, weight_version=weight_version, adapter=adapter, chunk_bytes=chunk_bytes
        )
    except (EngineError, ValueError) as exc:
        raise PushRefused(str(exc)) from exc


async def commit(engine: SGLangClient, update_id: str) -> str:
    """Swap the staged update in; the version the engine serves now. `PushRefused` if refused."""
    try:
        return (await weight_sender.commit(engine, update_id)).weight_version
    except EngineError as exc:
        raise PushRefused(str(exc)) from exc
