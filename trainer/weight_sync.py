"""Pushing new weights into the rollout engine.

    policy.export_hf(folder)                       # Hugging Face safetensors checkpoint
    await sync_weights(engine_url, folder, weight_version="3", engine_key=..., gateway_url=gateway, admin_key=...)

The gateway is paused around the swap (new calls wait, in-flight calls finish), the
engine loads the folder (SGLang's `/update_weights_from_disk`; on vLLM a pause, an in-place
reload through `/collective_rpc` and a new weight version), and the new weight version is
what later calls report; the engine's kind is `engine_backend`, or asked of the server.
Before anything is paused the checkpoint is checked against the engine: same vocabulary
size, same tokenizer (when the engine's tokenizer folder is readable here). A failed load
leaves the engine on its old weights, the gateway resumed, and raises `WeightSyncError`
with the engine's message.

After a LoRA step only the adapter moves (`sync_adapter`): the engine keeps its base weights,
serves the new PEFT adapter folder in place of the old one under the run's adapter name, drops
its prefix cache and reports the new weight version; `SyncResult.bytes` is what it read.

`transport="http"` (both functions) needs no shared disk: the tensors (the trainer's state
dict, an in-memory adapter, or a folder read here) go to roost's embedded engines in chunks while
they serve, and the gateway is paused for the commit alone (`weight_push`).

Behind a gateway with several engines, every engine it lists is synced with the one named and
the new version posted to it before it resumes (the barrier, `sync_engines`): an engine that did
not take the weights leaves rotation and the error names it; no engine serves old weights as new.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from roost.rollout.engine.model_spec import config_vocab_size, read_config
from roost.rollout.engine_api.sglang_client import EngineError, SGLangClient
from roost.rollout.engine_api.weight_upload import DEFAULT_CHUNK_BYTES, AdapterUpload
from roost.rollout.engine_api.wire import UpdateWeightsAnswer
from roost.rollout.lora import Adapter
from roost.tracing import Tracing

from .hf_checkpoint import CheckpointMismatch, tokenizer_fingerprint
from .sync_engines import Commit, Loaded, Target, WeightSyncError, check_loaded, sync_every, version_checked
from .weight_push import (
    PushRefused,
    Transport,
    adapter_config,
    as_engine_dtype,
    check_tensors,
    commit,
    folder_adapter,
    folder_tensors,
    require_embedded,
    stage,
    tensor_bytes,
)


@dataclass
class SyncResult:
    weight_version: str
    seconds: float
    paused_s: float
    bytes: int = 0
    """Size of the files in the folder the engine loaded: the whole model, or the adapter alone."""


def folder_bytes(folder: str | Path) -> int:
    return sum(path.stat().st_size for path in Path(folder).rglob("*") if path.is_file())


def check_compatible(folder: str | Path, model_info: dict[str, Any]) -> None:
    """Raise `CheckpointMismatch` if the checkpoint cannot replace the engine's weights."""
    vocab_size = config_vocab_size(read_config(folder))
    engine_vocab = model_info.get("vocab_size")
    if engine_vocab is not None and int(engine_vocab) != vocab_size:
        raise CheckpointMismatch(
            f"checkpoint {folder} has vocab_size {vocab_size} but the engine serves {engine_vocab}; "
            "train from the checkpoint the engine was started with"
        )
    tokenizer_path = model_info.get("tokenizer_path")
    if tokenizer_path and Path(tokenizer_path).is_dir():
        ours, theirs = tokenizer_fingerprint(folder), tokenizer_fingerprint(tokenizer_path)
        if ours and theirs and ours != theirs:
            raise CheckpointMismatch(
                f"checkpoint {folder} and the engine ({tokenizer_path}) use different tokenizers; "
                "token ids would not mean the same text"
            )


async def sync_weights(
    engine_url: str,
    folder: str | Path | None = None,
    *,
    tensors: Mapping[str, torch.Tensor] | None = None,
    transport: Transport = "disk",
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    weight_version: str | None = None,
    engine_key: str | None = None,
    gateway_url: str | None = None,
    admin_key: str | None = None,
    timeout_s: float = 600.0,
    engine_backend: str | None = None,
    tracing: Tracing | None = None,
) -> SyncResult:
    """Load new weights into the engine at `engine_url` (its key: `engine_key`; its kind:
    `engine_backend`, asked of the server when None) and every other engine the gateway lists,
    pausing the gateway (its key: `admin_key`) around the swap; in a `weight_sync` span when
    `tracing` is on.

    `transport="disk"`: each engine loads `folder` (a path on its machine). `"http"`: the tensors
    go to roost's embedded engines in chunks of about `chunk_bytes`, sent while they serve on and
    committed with the gateway paused: `tensors` (a Hugging Face state dict, as
    `MegatronPolicy.hf_state()` gives) or else `folder`'s, read here."""
    tracing = tracing or Tracing()
    target = Target(engine_url, engine_key, gateway_url, admin_key, timeout_s, engine_backend, tracing)
    attributes = {"roost.weight_version": weight_version, "roost.folder": str(folder), "roost.transport": transport}
    with tracing.span("weight_sync", attributes):
        if transport == "http":
            return await _push_weights(target, folder, tensors, weight_version, chunk_bytes)
        if folder is None or tensors is not None:
            raise WeightSyncError("transport 'disk' loads a folder: give `folder`, or transport='http' to send tensors")
        return await _sync_weights(target, Path(folder).resolve(), weight_version)


async def _sync_weights(target: Target, folder: Path, weight_version: str | None) -> SyncResult:
    started = time.perf_counter()
    # The gateway refused engines of another model: checking one checks them all.
    async with target.client(await target.backend()) as engine:
        check_compatible(folder, await engine.model_info())

    async def prepare(engine, one: Target) -> Commit:
        async def load() -> Loaded:
            try:
                answer = await engine.update_weights_from_disk(str(folder), weight_version=weight_version)
            except EngineError as exc:
                answer = UpdateWeightsAnswer(success=False, message=str(exc))
            if not answer.success:
                return Loaded(one.engine_url, error=answer.message)
            return version_checked(one.engine_url, answer.weight_version, weight_version)

        return load

    loaded, paused_s = await sync_every(target, prepare)
    version = check_loaded(loaded, str(folder))
    return SyncResult(version, time.perf_counter() - started, paused_s, folder_bytes(folder))


async def _push_weights(
    target: Target,
    folder: str | Path | None,
    tensors: Mapping[str, torch.Tensor] | None,
    weight_version: str | None,
    chunk_bytes: int,
) -> SyncResult:
    started = time.perf_counter()
    async with target.client("embedded") as engine:
        info = await _embedded_info(engine)
    if tensors is None:
        if folder is None:
            raise WeightSyncError("transport 'http' sends `tensors` (a state dict) or a `folder`'s; give one")
        check_compatible(folder, info)
        tensors = await folder_tensors(folder)
    check_tensors(tensors, info)
    tensors = as_engine_dtype(tensors, info)
    return await _staged_then_committed(target, tensors, weight_version, None, chunk_bytes, started)


async def _embedded_info(engine: SGLangClient) -> dict[str, Any]:
    try:
        await require_embedded(engine)
        return await engine.model_info()
    except (PushRefused, EngineError) as exc:
        raise WeightSyncError(str(exc)) from exc


async def _staged_then_committed(
    target: Target,
    tensors: Mapping[str, torch.Tensor],
    weight_version: str | None,
    adapter: AdapterUpload | None,
    chunk_bytes: int,
    started: float,
) -> SyncResult:
    """Send to every engine while it serves on; commit them all with the gateway paused."""
    what = "the adapter sent over HTTP" if adapter else "the weights sent over HTTP"

    async def prepare(engine, one: Target) -> Commit | Loaded:
        try:
            await require_embedded(engine)
            update_id = await stage(
                engine, tensors, weight_version=weight_version, adapter=adapter, chunk_bytes=chunk_bytes
            )
        except (PushRefused, EngineError) as exc:
            return Loaded(one.engine_url, error=str(exc))

        async def load() -> Loaded:
            try:
                return version_checked(one.engine_url, await commit(engine, update_id), weight_version)
            except PushRefused as exc:
                return Loaded(one.engine_url, error=str(exc))

        return load

    loaded, paused_s = await sync_every(target, prepare, backend="embedded")
    version = check_loaded(loaded, what)
    return SyncResult(version, time.perf_counter() - started, paused_s, tensor_bytes(tensors))


async def sync_adapter(
    engine_url: str,
    folder: str | Path | None,
    name: str,
    *,
    weight_version: str,
    adapter: Adapter | None = None,
    transport: Transport = "disk",
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    engine_key: str | None = None,
    gateway_url: str | None = None,
    admin_key: str | None = None,
    timeout_s: float = 600.0,
    engine_backend: str | None = None,
    tracing: Tracing | None = None,
) -> SyncResult:
    """Serve a LoRA adapter as `name` in place of each engine's adapter of that name (loaded if it
    has none), the base weights untouched, and make `weight_version` what later calls report; the
    gateway paused around it, every engine it lists synced, as `sync_weights` does.

    `transport="disk"`: each engine reads the PEFT folder `folder`. `"http"`: `adapter` (in
    memory: a spec and PEFT-named tensors, as `MegatronPolicy.adapter_state()` gives) or else
    `folder`'s, sent to roost's embedded engines with its config."""
    tracing = tracing or Tracing()
    target = Target(engine_url, engine_key, gateway_url, admin_key, timeout_s, engine_backend, tracing)
    attributes = {"roost.weight_version": weight_version, "roost.folder": str(folder), "roost.adapter": name}
    with tracing.span("weight_sync", {**attributes, "roost.transport": transport}):
        if transport == "http":
            return await _push_adapter(target, folder, name, adapter, weight_version, chunk_bytes)
        if folder is None or adapter is not None:
            raise WeightSyncError("transport 'disk' loads a folder: give `folder`, or transport='http' to send one")
        return await _load_adapter(target, Path(folder).resolve(), name, weight_version)


async def _load_adapter(target: Target, folder: Path, name: str, weight_version: str) -> SyncResult:
    started = time.perf_counter()

    async def prepare(engine, one: Target) -> Commit:
        async def load() -> Loaded:
            try:
                await engine.load_lora_adapter(name, str(folder), replace=True)
                # vLLM keys its prefix cache by the adapter's id, which an in-place load keeps
                await engine.flush_cache()
                await engine.update_weight_version(weight_version)
            except EngineError as exc:
                return Loaded(one.engine_url, error=str(exc))
            return Loaded(one.engine_url, weight_version)

        return load

    loaded, paused_s = await sync_every(target, prepare)
    check_loaded(loaded, f"the adapter {folder} as {name!r}")
    return SyncResult(weight_version, time.perf_counter() - started, paused_s, folder_bytes(folder))


async def _push_adapter(
    target: Target,
    folder: str | Path | None,
    name: str,
    adapter: Adapter | None,
    weight_version: str,
    chunk_bytes: int,
) -> SyncResult:
    started = time.perf_counter()
    if adapter is not None:
        config = adapter_config(adapter)
    elif folder is not None:
        adapter, config = await folder_adapter(folder)
    else:
        raise WeightSyncError("transport 'http' sends an `adapter` (in memory) or a `folder`'s; give one")
    upload = AdapterUpload(lora_name=name, config=config, load_inplace=True)
    async with target.client("embedded") as engine:
        info = await _embedded_info(engine)
    tensors = as_engine_dtype(adapter.weights, info)
    return await _staged_then_committed(target, tensors, weight_version, upload, chunk_bytes, started)
