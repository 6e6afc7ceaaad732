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
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roost.rollout.engine.model_spec import read_config
from roost.rollout.engine_api.client import detect_backend, engine_client
from roost.rollout.engine_api.sglang_client import EngineError
from roost.rollout.engine_api.wire import UpdateWeightsAnswer
from roost.rollout.gateway.control.client import ControlPlaneError, GatewayClient
from roost.tracing import Tracing

from .hf_checkpoint import CheckpointMismatch, tokenizer_fingerprint

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


async def sync_weights(
    engine_url: str,
    folder: str | Path,
    *,
    weight_version: str | None = None,
    engine_key: str | None = None,
    gateway_url: str | None = None,
    admin_key: str | None = None,
    timeout_s: float = 600.0,
    engine_backend: str | None = None,
    tracing: Tracing | None = None,
) -> SyncResult:
    """Load the checkpoint at `folder` into the engine (its key: `engine_key`; its kind:
    `engine_backend`, asked of the server when None), pausing the gateway (its key: `admin_key`)
    around it; in a `weight_sync` span when `tracing` is on."""
    tracing = tracing or Tracing()
    with tracing.span("weight_sync", {"roost.weight_version": weight_version, "roost.folder": str(folder)}):
        return await _sync_weights(
            engine_url, folder, weight_version, engine_key, gateway_url, admin_key, timeout_s, engine_backend, tracing
        )


async def _sync_weights(
    engine_url: str,
    folder: str | Path,
    weight_version: str | None,
    engine_key: str | None,
    gateway_url: str | None,
    admin_key: str | None,
    timeout_s: float,
    engine_backend: str | None,
    tracing: Tracing,
) -> SyncResult:
    started = time.perf_counter()
    folder = Path(folder).resolve()
    backend = engine_backend or await detect_backend(engine_url)
    async with engine_client(
        backend, engine_url, api_key=engine_key, timeout_s=timeout_s, trace_configs=tracing.aiohttp_trace_configs()
    ) as engine:
        check_compatible(folder, await engine.model_info())
        async with _paused(gateway_url, admin_key, timeout_s, tracing):
            paused = time.perf_counter()
            try:
                answer = await engine.update_weights_from_disk(str(folder), weight_version=weight_version)
            except EngineError as exc:
                answer = UpdateWeightsAnswer(success=False, message=str(exc))
        paused_s = time.perf_counter() - paused
    if not answer.success:
        raise WeightSyncError(f"engine at {engine_url} did not load {folder}: {answer.message}")
    version = str(weight_version if answer.weight_version is None else answer.weight_version)
    if weight_version is not None and version != weight_version:
        raise WeightSyncError(f"engine reports weight version {version!r}, expected {weight_version!r}")
    return SyncResult(version, time.perf_counter() - started, paused_s, folder_bytes(folder))


async def sync_adapter(
    engine_url: str,
    folder: str | Path,
    name: str,
    *,
    weight_version: str,
    engine_key: str | None = None,
    gateway_url: str | None = None,
    admin_key: str | None = None,
    timeout_s: float = 600.0,
    engine_backend: str | None = None,
    tracing: Tracing | None = None,
) -> SyncResult:
    """Serve the PEFT adapter folder `folder` as `name` in place of the engine's adapter of that
    name (loaded if it has none), the base weights untouched, and make `weight_version` what later
    calls report; the gateway paused around it, as `sync_weights` does."""
    tracing = tracing or Tracing()
    attributes = {"roost.weight_version": weight_version, "roost.folder": str(folder), "roost.adapter": name}
    with tracing.span("weight_sync", attributes):
        started = time.perf_counter()
        folder = Path(folder).resolve()
        backend = engine_backend or await detect_backend(engine_url)
        failure = None
        async with engine_client(
            backend, engine_url, api_key=engine_key, timeout_s=timeout_s, trace_configs=tracing.aiohttp_trace_configs()
        ) as engine:
            async with _paused(gateway_url, admin_key, timeout_s, tracing):
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
        raise WeightSyncError(f"engine at {engine_url} did not load the adapter {folder} as {name!r}: {failure}")
    return SyncResult(weight_version, time.perf_counter() - started, paused_s, folder_bytes(folder))
