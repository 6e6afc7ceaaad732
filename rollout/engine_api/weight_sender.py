"""Sending weights to roost's engine over HTTP in chunks (the wire: `weight_upload`).

    async with SGLangClient(url, api_key=key) as engine:
        answer = await send_weights(engine, policy.hf_state(), weight_version="3")

The engine serves the old weights until the commit; a chunk it refuses aborts the update, so
nothing half-sent stays staged there. `stage` and `commit` apart let a sync send while the
engine serves, and pause the gateway for the commit alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from pydantic import ValidationError

from roost.rollout.engine_api.sglang_client import EngineError, EngineHTTP, EngineProtocolError
from roost.rollout.engine_api.weight_upload import (
    DEFAULT_CHUNK_BYTES,
    AdapterUpload,
    BeginAnswer,
    BeginUpload,
    CommitAnswer,
    chunked,
    encode_chunk,
    manifest,
)

BEGIN_PATH = "/roost/weights/begin"


async def send_weights(
    engine: EngineHTTP,
    tensors: Mapping[str, torch.Tensor],
    *,
    weight_version: str | None = None,
    adapter: AdapterUpload | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> CommitAnswer:
    """Send `tensors` (base weights under Hugging Face names, or `adapter`'s under PEFT's) in
    chunks of about `chunk_bytes` and commit them; returns the engine's answer to the commit.
    Raises `EngineError` with the engine's message when it refuses a step (the update aborted)."""
    update_id = await stage(engine, tensors, weight_version=weight_version, adapter=adapter, chunk_bytes=chunk_bytes)
    return await commit(engine, update_id)


async def stage(
    engine: EngineHTTP,
    tensors: Mapping[str, torch.Tensor],
    *,
    weight_version: str | None = None,
    adapter: AdapterUpload | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> str:
    """Begin an update and send every chunk, uncommitted (the engine serves on meanwhile); its id.
    A refused step aborts the update and raises `EngineError`."""
    begin = BeginUpload(tensors=manifest(tensors), weight_version=weight_version, adapter=adapter)
    opened = _parse(BeginAnswer, await engine.post(BEGIN_PATH, begin.model_dump(exclude_none=True)))
    try:
        for names in chunked(tensors, chunk_bytes):
            body = encode_chunk({name: tensors[name] for name in names})
            await engine.post(f"/roost/weights/{opened.update_id}/chunk", raw=body)
    except EngineError:
        await abort(engine, opened.update_id)
        raise
    return opened.update_id


async def commit(engine: EngineHTTP, update_id: str) -> CommitAnswer:
    """Swap the staged update in; a refusal aborts it and raises `EngineError`."""
    try:
        return _parse(CommitAnswer, await engine.post(f"/roost/weights/{update_id}/commit"))
    except EngineError:
        await abort(engine, update_id)
        raise


async def abort(engine: EngineHTTP, update_id: str) -> None:
    """Drop the staged update, if the engine still holds it."""
    try:
        await engine.post(f"/roost/weights/{update_id}/abort")
    except EngineError:
        pass  # committed or dropped already: nothing stays staged either way


def _parse(model: Any, body: Any) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise EngineProtocolError(f"not an answer of roost's weight upload: {str(body)[:200]}") from exc
