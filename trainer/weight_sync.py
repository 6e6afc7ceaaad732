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
dict, an in-memory adapter, or a folder read here) go to roost's embedded engine in chunks while
it serves, and the gateway is paused for the commit alone (`weight_push`). Each function syncs
one engine, named by its URL.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from roost.rollout.engine.model_spec import read_config
from roost.rollout.engine_api.client import detect_backend, engine_client
from roost.rollout.engine_api.sglang_client import EngineError, SGLangClient
from roost.rollout.engine_api.weight_upload import DEFAULT_CHUNK_BYTES, AdapterUpload
from roost.rollout.engine_api.wire import UpdateWeightsAnswer
from roost.rollout.gateway.control.client import ControlPlaneError, GatewayClient
from roost.rollout.lora import Adapter
from roost.tracing import Tracing

from .hf_checkpoint import CheckpointMismatch, tokenizer_fingerprint
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

log = logging.getLogger(__name__)


class WeightSyncError(RuntimeError):
    """The engine did not take the new weights; it still serves the old ones."""


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
    config = read_config(folder)
    engine_vocab = model_info.get("vocab_size")
    if engine_vocab is not None and int(engine_vocab) != int(config["vocab_size"]):
        raise CheckpointMismatch(
            f"checkpoint {folder} has vocab_size {config['vocab_size']} but the engine serves {engine_vocab}; "
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


@contextlib.asynccontextmanager
async def _paused(url: str | None, admin_key: str | None, timeout_s: float, tracing: Tracing) -> AsyncIterator[None]:
    """The gateway at `url` (if any) paused for the body, and resumed after it whatever happens."""
    if not url:
        yield
        return
    async with GatewayClient(url, admin_key=admin_key, timeout_s=timeout_s, tracing=tracing) as gateway:
        try:
            state = await gateway.pause()
        except ControlPlaneError as exc:
            raise WeightSyncError(f"gateway {url} could not be paused: {exc}") from exc
        if state.drained is False:
            log.warning(
                "gateway %s paused with %d calls still in flight after its drain timeout; they finish "
                "while the weights change",
                url,
                state.in_flight,
            )
        try:
            yield
        finally:
            try:
                await gateway.resume()
            except ControlPlaneError as exc:
                raise WeightSyncError(f"gateway {url} could not be resumed: {exc}") from exc


@dataclass
class _Target:
    """One engine, and the gateway in front of it, as a sync reaches them."""

    engine_url: str
    engine_key: str | None
    gateway_url: str | None
    admin_key: str | None
    timeout_s: float
    engine_backend: str | None
    tracing: Tracing

    def client(self, backend: str):
        return engine_client(
            backend,
            self.engine_url,
            api_key=self.engine_key,
            timeout_s=self.timeout_s,
            trace_configs=self.tracing.aiohttp_trace_configs(),
        )

    def paused(self):
        return _paused(self.gateway_url, self.admin_key, self.timeout_s, self.tracing)


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
    """Load new weights into the one engine at `engine_url` (its key: `engine_key`; its kind:
    `engine_backend`, asked of the server when None), pausing the gateway (its key: `admin_key`)
    around the swap; in a `weight_sync` span when `tracing` is on.

    `transport="disk"`: the engine loads `folder` (a path on its machine). `"http"`: the tensors
    go to roost's embedded engine in chunks of about `chunk_bytes`, sent while it serves on and
    committed with the gateway paused: `tensors` (a Hugging Face state dict, as
    `MegatronPolicy.hf_state()` gives) or else `folder`'s, read here."""
    tracing = tracing or Tracing()
    target = _Target(engine_url, engine_key, gateway_url, admin_key, timeout_s, engine_backend, tracing)
    attributes = {"roost.weight_version": weight_version, "roost.folder": str(folder), "roost.transport": transport}
    with tracing.span("weight_sync", attributes):
        if transport == "http":
            return await _push_weights(target, folder, tensors, weight_version, chunk_bytes)
        if folder is None or tensors is not None:
            raise WeightSyncError("transport 'disk' loads a folder: give `folder`, or transport='http' to send tensors")
        return await _sync_weights(target, Path(folder).resolve(), weight_version)


async def _sync_weights(target: _Target, folder: Path, weight_version: str | None) -> SyncResult:
    started = time.perf_counter()
    backend = target.engine_backend or await detect_backend(target.engine_url)
    async with target.client(backend) as engine:
        check_compatible(folder, await engine.model_info())
        async with target.paused():
            paused = time.perf_counter()
            try:
                answer = await engine.update_weights_from_disk(str(folder), weight_version=weight_version)
            except EngineError as exc:
                answer = UpdateWeightsAnswer(success=False, message=str(exc))
        paused_s = time.perf_counter() - paused
    if not answer.success:
        raise WeightSyncError(f"engine at {target.engine_url} did not load {folder}: {answer.message}")
    version = str(weight_version if answer.weight_version is None else answer.weight_version)
    _check_version(version, weight_version)
    return SyncResult(version, time.perf_counter() - started, paused_s, folder_bytes(folder))


def _check_version(version: str, wanted: str | None) -> None:
    if wanted is not None and version != wanted:
        raise WeightSyncError(f"engine reports weight version {version!r}, expected {wanted!r}")


async def _push_weights(
    target: _Target,
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
        return await _staged_then_committed(target, engine, tensors, weight_version, None, chunk_bytes, started)


async def _embedded_info(engine: SGLangClient) -> dict[str, Any]:
    try:
        await require_embedded(engine)
        return await engine.model_info()
    except (PushRefused, EngineError) as exc:
        raise WeightSyncError(str(exc)) from exc


async def _staged_then_committed(
    target: _Target,
    engine: SGLangClient,
    tensors: Mapping[str, torch.Tensor],
    weight_version: str | None,
    adapter: AdapterUpload | None,
    chunk_bytes: int,
    started: float,
) -> SyncResult:
    """Send while the engine serves on; commit with the gateway paused."""
    what = "the adapter" if adapter else "the weights"
    try:
        update_id = await stage(
            engine, tensors, weight_version=weight_version, adapter=adapter, chunk_bytes=chunk_bytes
        )
        async with target.paused():
            paused = time.perf_counter()
            version = await commit(engine, update_id)
        paused_s = time.perf_counter() - paused
    except PushRefused as exc:
        raise WeightSyncError(f"engine at {target.engine_url} did not take {what} sent over HTTP: {exc}") from exc
    _check_version(version, weight_version)
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
    """Serve a LoRA adapter as `name` in place of the engine's adapter of that name (loaded if it
    has none), the base weights untouched, and make `weight_version` what later calls report; the
    gateway paused around it, as `sync_weights` does.

    `transport="disk"`: the engine reads the PEFT folder `folder`. `"http"`: `adapter` (in
    memory: a spec and PEFT-named tensors, as `MegatronPolicy.adapter_state()` gives) or else
    `folder`'s, sent to roost's embedded engine with its config."""
    tracing = tracing or Tracing()
    target = _Target(engine_url, engine_key, gateway_url, admin_key, timeout_s, engine_backend, tracing)
    attributes = {"roost.weight_version": weight_version, "roost.folder": str(folder), "roost.adapter": name}
    with tracing.span("weight_sync", {**attributes, "roost.transport": transport}):
        if transport == "http":
            return await _push_adapter(target, folder, name, adapter, weight_version, chunk_bytes)
        if folder is None or adapter is not None:
            raise WeightSyncError("transport 'disk' loads a folder: give `folder`, or transport='http' to send one")
        return await _load_adapter(target, Path(folder).resolve(), name, weight_version)


async def _load_adapter(target: _Target, folder: Path, name: str, weight_version: str) -> SyncResult:
    started = time.perf_counter()
    backend = target.engine_backend or await detect_backend(target.engine_url)
    failure = None
    async with target.client(backend) as engine:
        async with target.paused():
            paused = time.perf_counter()
            try:
                await engine.load_lora_adapter(name, str(folder), replace=True)
                # vLLM keys its prefix cache by the adapter's id, which an in-place load keeps
                await engine.flush_cache()
                await engine.update_weight_version(weight_version)
            except EngineError as exc:
                failure = str(exc)
        paused_s = time.perf_counter() - paused
    if failure is not None:
        raise WeightSyncError(f"engine at {target.engine_url} did not load the adapter {folder} as {name!r}: {failure}")
    return SyncResult(weight_version, time.perf_counter() - started, paused_s, folder_bytes(folder))


async def _push_adapter(
    target: _Target,
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
        return await _staged_then_committed(target, engine, tensors, weight_version, upload, chunk_bytes, started)
