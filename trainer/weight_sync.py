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

Behind a gateway with several engines (`GET /admin/engines`), every engine it lists is synced
(with `engine_url`, in parallel) while the gateway is paused, and the new version is posted to it
(`POST /admin/weight_version`, the barrier) before it resumes: an engine that did not take the new
weights leaves rotation (`stale`) and the error names it, while the others serve the new version;
no engine serves old weights as new. When none took them, nothing is posted and all keep the old.
Each engine is loaded by a function of its URL alone (`_load_weights`, `_load_adapter`).

After a LoRA step only the adapter moves (`sync_adapter`): the engine keeps its base weights,
serves the new PEFT adapter folder in place of the old one under the run's adapter name, drops
its prefix cache and reports the new weight version; `SyncResult.bytes` is what it read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
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
async def _paused(
    url: str | None, admin_key: str | None, timeout_s: float, tracing: Tracing
) -> AsyncIterator[GatewayClient | None]:
    """The gateway at `url` (if any) paused for the body, and resumed after it whatever happens;
    its client is what the body gets (None without a gateway)."""
    if not url:
        yield None
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
            yield gateway
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


@dataclass
class _Loaded:
    """What one engine did with the new weights: the version it reports, or why it failed."""

    url: str
    version: str = ""
    error: str = ""


async def _listed_engines(gateway: GatewayClient | None) -> list[str] | None:
    """The engines the gateway routes; None when it lists none (no gateway, a pass-through one)."""
    if gateway is None:
        return None
    try:
        return [e.url for e in (await gateway.engines()).engines]
    except ControlPlaneError as exc:
        log.info("gateway %s lists no engines (%s); syncing the engine named alone", gateway.url, exc)
        return None


async def _barrier(gateway: GatewayClient | None, loaded: list[_Loaded]) -> None:
    """Tell the gateway the version the engines that took the weights report: the others leave
    rotation before it resumes. Nothing is posted when none took them (all keep the old)."""
    took = [x for x in loaded if not x.error]
    if gateway is None or not took:
        return
    try:
        await gateway.set_weight_version(took[0].version)
    except ControlPlaneError as exc:
        raise WeightSyncError(f"gateway {gateway.url} did not take weight version {took[0].version!r}: {exc}") from exc


async def _sync_every(
    engine_url: str,
    gateway_url: str | None,
    admin_key: str | None,
    timeout_s: float,
    tracing: Tracing,
    load: Callable[[str], Awaitable[_Loaded]],
) -> tuple[list[_Loaded], float]:
    """`load` every engine (in parallel) while the gateway is paused, then the barrier; returns
    what each did and how long the gateway was paused."""
    async with _paused(gateway_url, admin_key, timeout_s, tracing) as gateway:
        paused = time.perf_counter()
        listed = await _listed_engines(gateway)
        urls = [engine_url, *(u for u in listed or [] if u != engine_url.rstrip("/"))]
        loaded = list(await asyncio.gather(*(load(url) for url in urls)))
        await _barrier(gateway if listed is not None else None, loaded)
    return loaded, time.perf_counter() - paused


def _check_loaded(loaded: list[_Loaded], what: str) -> str:
    """The version the engines took; `WeightSyncError` naming each engine that did not."""
    failed = [x for x in loaded if x.error]
    if not failed:
        return loaded[0].version
    reasons = "; ".join(f"engine at {x.url} did not load {what}: {x.error}" for x in failed)
    took = [x for x in loaded if not x.error]
    if not took:
        raise WeightSyncError(f"{reasons}; every engine still serves its old weights")
    raise WeightSyncError(
        f"{reasons}; taken out of rotation (stale) until a sync succeeds on it; "
        f"{', '.join(x.url for x in took)} serve weight version {took[0].version!r}"
    )


async def _load_weights(
    engine_url: str,
    folder: Path,
    weight_version: str | None,
    engine_key: str | None,
    timeout_s: float,
    engine_backend: str | None,
    tracing: Tracing,
) -> _Loaded:
    """Load `folder` into the engine at `engine_url`; what it reports, or why it failed."""
    backend = engine_backend or await detect_backend(engine_url)
    async with engine_client(
        backend, engine_url, api_key=engine_key, timeout_s=timeout_s, trace_configs=tracing.aiohttp_trace_configs()
    ) as engine:
        try:
            answer = await engine.update_weights_from_disk(str(folder), weight_version=weight_version)
        except EngineError as exc:
            answer = UpdateWeightsAnswer(success=False, message=str(exc))
    if not answer.success:
        return _Loaded(engine_url, error=answer.message)
    version = str(weight_version if answer.weight_version is None else answer.weight_version)
    if weight_version is not None and version != weight_version:
        return _Loaded(engine_url, version, f"it reports weight version {version!r}, expected {weight_version!r}")
    return _Loaded(engine_url, version)


async def _check_engine(
    engine_url: str, folder: Path, engine_key: str | None, timeout_s: float, backend: str | None, tracing: Tracing
) -> None:
    """`check_compatible` against the engine at `engine_url`, before anything is paused."""
    backend = backend or await detect_backend(engine_url)
    async with engine_client(
        backend, engine_url, api_key=engine_key, timeout_s=timeout_s, trace_configs=tracing.aiohttp_trace_configs()
    ) as engine:
        check_compatible(folder, await engine.model_info())


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
    # The gateway refused engines of another model: checking one checks them all.
    await _check_engine(engine_url, folder, engine_key, timeout_s, engine_backend, tracing)

    def load(url: str) -> Awaitable[_Loaded]:
        return _load_weights(url, folder, weight_version, engine_key, timeout_s, engine_backend, tracing)

    loaded, paused_s = await _sync_every(engine_url, gateway_url, admin_key, timeout_s, tracing, load)
    version = _check_loaded(loaded, str(folder))
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

        def load(url: str) -> Awaitable[_Loaded]:
            return _load_adapter(url, folder, name, weight_version, engine_key, timeout_s, engine_backend, tracing)

        loaded, paused_s = await _sync_every(engine_url, gateway_url, admin_key, timeout_s, tracing, load)
    _check_loaded(loaded, f"the adapter {folder} as {name!r}")
    return SyncResult(weight_version, time.perf_counter() - started, paused_s, folder_bytes(folder))


async def _load_adapter(
    engine_url: str,
    folder: Path,
    name: str,
    weight_version: str,
    engine_key: str | None,
    timeout_s: float,
    engine_backend: str | None,
    tracing: Tracing,
) -> _Loaded:
    """Serve the adapter `folder` as `name` on the engine at `engine_url`, at `weight_version`."""
    backend = engine_backend or await detect_backend(engine_url)
    async with engine_client(
        backend, engine_url, api_key=engine_key, timeout_s=timeout_s, trace_configs=tracing.aiohttp_trace_configs()
    ) as engine:
        try:
            await engine.load_lora_adapter(name, str(folder), replace=True)
            # vLLM keys its prefix cache by the adapter's id, which an in-place load keeps
            await engine.flush_cache()
            await engine.update_weight_version(weight_version)
        except EngineError as exc:
            return _Loaded(engine_url, error=str(exc))
    return _Loaded(engine_url, weight_version)
