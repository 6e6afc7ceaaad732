"""Every engine behind the gateway, synced as one: each prepared while it serves, all committed
while the gateway is paused, then the version barrier.

Behind a gateway with several engines (`GET /admin/engines`), every engine it lists is synced
with the one named, in parallel. A transport's `prepare` runs first, outside the pause (an HTTP
send stages its tensors there); each engine's commit runs with the gateway paused; then the new
version is posted (`POST /admin/weight_version`, the barrier) before the gateway resumes: an
engine that did not take the new weights leaves rotation (`stale`) and the error names it, while
the others serve the new version; no engine serves old weights as new. When none took them,
nothing is posted and all keep the old. A gateway that lists no engines (an old one, a stand-in)
gets the named engine synced alone and no barrier.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace

from roost.rollout.engine_api.client import detect_backend, engine_client
from roost.rollout.gateway.control.client import ControlPlaneError, GatewayClient
from roost.tracing import Tracing

log = logging.getLogger(__name__)


class WeightSyncError(RuntimeError):
    """The engine did not take the new weights; it still serves the old ones."""


@dataclass
class Loaded:
    """What one engine did with the new weights: the version it reports, or why it failed."""

    url: str
    version: str = ""
    error: str = ""


Commit = Callable[[], Awaitable[Loaded]]


@dataclass
class Target:
    """One engine, and the gateway in front of it, as a sync reaches them."""

    engine_url: str
    engine_key: str | None
    gateway_url: str | None
    admin_key: str | None
    timeout_s: float
    engine_backend: str | None
    tracing: Tracing

    def at(self, url: str) -> Target:
        return replace(self, engine_url=url)

    async def backend(self) -> str:
        return self.engine_backend or await detect_backend(self.engine_url)

    def client(self, backend: str):
        return engine_client(
            backend,
            self.engine_url,
            api_key=self.engine_key,
            timeout_s=self.timeout_s,
            trace_configs=self.tracing.aiohttp_trace_configs(),
        )

    def gateway(self) -> GatewayClient:
        if not self.gateway_url:
            raise ValueError("this sync has no gateway to reach")
        return GatewayClient(self.gateway_url, admin_key=self.admin_key, timeout_s=self.timeout_s, tracing=self.tracing)


async def sync_every(
    target: Target, prepare: Callable[[object, Target], Awaitable[Commit | Loaded]], *, backend: str | None = None
) -> tuple[list[Loaded], float]:
    """`prepare` each engine (its client open, in parallel, while it serves): its commit, or a
    `Loaded` with the error that refused it; then run every commit with the gateway paused, then
    the barrier. What each engine did, and how long the gateway was paused (nothing is paused
    when every engine refused). `backend`: the client every engine is reached with (default: its own)."""
    urls, listed = await _engine_urls(target)
    targets = [target.at(url) for url in urls]
    async with contextlib.AsyncExitStack() as stack:
        kinds = await asyncio.gather(*(t.backend() for t in targets)) if backend is None else [backend] * len(targets)
        clients = [await stack.enter_async_context(t.client(kind)) for t, kind in zip(targets, kinds)]
        prepared = await asyncio.gather(*(prepare(client, t) for client, t in zip(clients, targets)))
        refused = [p for p in prepared if isinstance(p, Loaded)]
        if len(refused) == len(prepared):
            return refused, 0.0
        async with _paused(target) as gateway:
            paused = time.perf_counter()
            loaded = list(await asyncio.gather(*(_commit(p) for p in prepared)))
            if listed and gateway is not None:
                await _barrier(gateway, loaded)
        paused_s = time.perf_counter() - paused
    return loaded, paused_s


async def _commit(prepared: Commit | Loaded) -> Loaded:
    return prepared if isinstance(prepared, Loaded) else await prepared()


def check_loaded(loaded: list[Loaded], what: str) -> str:
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


def version_checked(url: str, reported: str | None, wanted: str | None) -> Loaded:
    """The engine's answer as a `Loaded`: the version it reports, an error if not the one asked."""
    version = str(wanted if reported is None else reported)
    if wanted is not None and version != wanted:
        return Loaded(url, version, f"it reports weight version {version!r}, expected {wanted!r}")
    return Loaded(url, version)


async def _engine_urls(target: Target) -> tuple[list[str], bool]:
    """The named engine and every other the gateway lists; whether it lists engines at all."""
    if not target.gateway_url:
        return [target.engine_url], False
    try:
        async with target.gateway() as gateway:
            engines = (await gateway.engines()).engines
    except ControlPlaneError as exc:
        log.info("gateway %s lists no engines (%s); syncing the engine named alone", target.gateway_url, exc)
        return [target.engine_url], False
    named = target.engine_url.rstrip("/")
    return [target.engine_url, *(e.url for e in engines if e.url.rstrip("/") != named)], True


async def _barrier(gateway: GatewayClient, loaded: list[Loaded]) -> None:
    """Tell the gateway the version the engines that took the weights report: the others leave
    rotation before it resumes. Nothing is posted when none took them (all keep the old)."""
    took = [x for x in loaded if not x.error]
    if not took:
        return
    try:
        await gateway.set_weight_version(took[0].version)
    except ControlPlaneError as exc:
        raise WeightSyncError(f"gateway {gateway.url} did not take weight version {took[0].version!r}: {exc}") from exc


@contextlib.asynccontextmanager
async def _paused(target: Target) -> AsyncIterator[GatewayClient | None]:
    """The gateway (if any) paused for the body, and resumed after it whatever happens; its client
    is what the body gets (None without a gateway)."""
    if not target.gateway_url:
        yield None
        return
    url = target.gateway_url
    async with target.gateway() as gateway:
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
