"""Several engines behind one gateway: which engine serves each call.

A session is pinned to an engine at its first call, so its later calls find their prefix in that
engine's cache; a new session goes to the engine with the fewest calls in flight (ties: the
fewest pinned sessions, then the order the engines joined in). An engine that refuses
connections or times out is marked `down`; its sessions are placed again at their next call, and
a probe brings it back once it answers (until then it is tried only when no engine is up). An engine that does not report the gateway's weight
version is `stale`: it takes no calls until it is synced (the weight-sync barrier, `barrier`).
All engines serve one model: one that reports another (`ModelIdentity`) is refused.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from roost.rollout.engine_api.client import EngineClient
from roost.rollout.engine_api.model_identity import ModelIdentity
from roost.rollout.engine_api.sglang_client import EngineError
from roost.rollout.gateway.core.errors import BackendUnavailable

log = logging.getLogger("roost.gateway.router")

EngineState = Literal["up", "down", "stale"]
PROBE_TIMEOUT_S = 5.0  # a probe that waits longer finds the engine still down


class EngineMismatch(ValueError):
    """An engine serves another model or tokenizer than the gateway's other engines."""


@dataclass
class EngineSlot:
    """One engine behind the gateway, and what the router knows of it."""

    engine_id: str
    url: str
    client: EngineClient
    identity: ModelIdentity | None
    """None until the engine first answered /get_model_info."""
    weight_version: str
    state: EngineState = "up"
    in_flight: int = 0
    calls: int = 0
    """Engine requests the gateway sent it (a retried call counts on each engine it tried)."""
    error: str = ""
    """Why it is down or stale; "" while up."""


async def identity_of(info: dict[str, Any]) -> ModelIdentity:
    """The engine's model identity (it reads tokenizer files: off the event loop)."""
    return await asyncio.to_thread(ModelIdentity.of, info)


class Router:
    def __init__(self, max_pins: int, retry_after_s: int):
        self._engines: dict[str, EngineSlot] = {}
        self._pins: OrderedDict[str, str] = OrderedDict()  # session id -> engine id, least recent first
        self._pinned: Counter[str] = Counter()
        self._max_pins = max_pins
        self._retry_after_s = retry_after_s
        self._joined = 0
        self.identity: ModelIdentity | None = None
        self.weight_version = ""
        """The version every engine in rotation serves: the first engine's, then each barrier's."""

    @property
    def engines(self) -> list[EngineSlot]:
        return list(self._engines.values())

    def sessions_on(self, engine_id: str) -> int:
        return self._pinned[engine_id]

    def get(self, engine_id: str) -> EngineSlot | None:
        return self._engines.get(engine_id)

    def by_url(self, url: str) -> EngineSlot | None:
        return next((e for e in self._engines.values() if e.url == url.rstrip("/")), None)

    def add(self, url: str, client: EngineClient, identity: ModelIdentity | None, info: dict[str, Any]) -> EngineSlot:
        """Take an engine in; raise `EngineMismatch` when it serves another model than the others.
        One that reports another weight version than the gateway's joins `stale`; one that did not
        answer (`identity` None) joins `down`, for the probe to bring in."""
        if identity is not None and (problem := self._mismatch(url, identity)):
            raise EngineMismatch(problem)
        self._joined += 1
        slot = EngineSlot(f"e{self._joined}", url.rstrip("/"), client, identity, "")
        self._engines[slot.engine_id] = slot
        if identity is None:
            self.mark_down(slot, "did not answer /get_model_info when it joined")
        else:
            self._admit(slot, identity, info)
        return slot

    def remove(self, engine_id: str) -> EngineSlot:
        slot = self._engines.pop(engine_id)
        for sid in [s for s, e in self._pins.items() if e == engine_id]:
            self._unpin(sid)
        return slot

    def pick(self, session_id: str, exclude: tuple[str, ...] = ()) -> EngineSlot:
        """The engine for the session's next call: its pinned one while that is up, else the least
        loaded one (then pinned). With none up, one that is down is tried (it may answer again
        before its probe: a lone engine that timed out once is not given up on); a stale one never
        is. 503 when there is neither."""
        pinned = self._engines.get(self._pins.get(session_id, ""))
        if pinned is not None and pinned.state == "up" and pinned.engine_id not in exclude:
            self._pins.move_to_end(session_id)
            return pinned
        up = self._candidates("up", exclude) or self._candidates("down", exclude)
        if not up:
            raise self._none_up(exclude)
        chosen = min(up, key=lambda e: (e.in_flight, self._pinned[e.engine_id]))
        self._pin(session_id, chosen.engine_id)
        return chosen

    @contextmanager
    def serving(self, slot: EngineSlot) -> Iterator[EngineSlot]:
        """Count a request on `slot` while it runs."""
        self.begin(slot)
        try:
            yield slot
        finally:
            self.end(slot)

    def begin(self, slot: EngineSlot) -> None:
        slot.in_flight += 1
        slot.calls += 1

    def end(self, slot: EngineSlot) -> None:
        slot.in_flight -= 1

    def mark_down(self, slot: EngineSlot, error: str) -> None:
        if slot.state != "down":
            log.warning("engine %s at %s is down: %s", slot.engine_id, slot.url, error)
        slot.state, slot.error = "down", error

    async def refresh(self, slot: EngineSlot) -> None:
        """Ask the engine what it serves now: up at the gateway's version, stale behind it, down
        when it does not answer (or serves another model since a restart)."""
        try:
            info = await asyncio.wait_for(slot.client.model_info(), PROBE_TIMEOUT_S)
        except (EngineError, TimeoutError) as exc:
            self.mark_down(slot, f"does not answer /get_model_info: {exc}")
            return
        identity = await identity_of(info)
        if problem := self._mismatch(slot.url, identity):
            self.mark_down(slot, problem)
            return
        self._admit(slot, identity, info)

    async def barrier(self, weight_version: str) -> None:
        """The gateway's version is now `weight_version`: every engine is asked its own, and one
        that does not report it leaves rotation (`stale`) until it does."""
        self.weight_version = weight_version
        await asyncio.gather(*(self.refresh(e) for e in self.engines))

    async def probe(self) -> None:
        """Ask each engine out of rotation again (one probe round)."""
        await asyncio.gather(*(self.refresh(e) for e in self.engines if e.state != "up"))

    async def probe_forever(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await self.probe()

    def _candidates(self, state: EngineState, exclude: tuple[str, ...]) -> list[EngineSlot]:
        return [e for e in self._engines.values() if e.state == state and e.engine_id not in exclude]

    async def close(self) -> None:
        await asyncio.gather(*(e.client.close() for e in self.engines), return_exceptions=True)

    def _mismatch(self, url: str, identity: ModelIdentity) -> str:
        """Why the engine at `url` cannot serve this gateway's sessions; "" when it can."""
        if self.identity is None or not (diff := self.identity.differences(identity)):
            return ""
        return (
            f"the engine at {url} serves another model than this gateway's engines: {'; '.join(diff)} "
            "(here: the gateway's engines, there: this one); start it with the same model and tokenizer"
        )

    def _admit(self, slot: EngineSlot, identity: ModelIdentity, info: dict[str, Any]) -> None:
        """The first engine that answers sets the model and the weight version. An engine whose
        answer has no `weight_version` cannot be checked against it: it is taken as current."""
        reported = info.get("weight_version")
        version = self.weight_version if reported is None else str(reported)
        if self.identity is None:
            self.identity, self.weight_version = identity, version
        slot.identity = identity
        self._set_version_state(slot, version)

    def _set_version_state(self, slot: EngineSlot, version: str) -> None:
        slot.weight_version = version
        if version == self.weight_version:
            if slot.state != "up":
                log.info("engine %s at %s is up at weight version %r", slot.engine_id, slot.url, version)
            slot.state, slot.error = "up", ""
        else:
            slot.state = "stale"
            slot.error = f"serves weight version {version!r}, the gateway {self.weight_version!r}: sync it"

    def release(self, session_id: str) -> EngineSlot | None:
        """A finished session's pin let go; the engine it was pinned to (None: none, or gone)."""
        engine = self._engines.get(self._pins.get(session_id, ""))
        self._unpin(session_id)
        return engine

    def _pin(self, session_id: str, engine_id: str) -> None:
        self._unpin(session_id)
        self._pins[session_id] = engine_id
        self._pinned[engine_id] += 1
        if len(self._pins) > self._max_pins:  # the oldest session is placed again if it calls again
            self._unpin(next(iter(self._pins)))

    def _unpin(self, session_id: str) -> None:
        engine_id = self._pins.pop(session_id, None)
        if engine_id is not None:
            self._pinned[engine_id] -= 1

    def _none_up(self, tried: tuple[str, ...]) -> BackendUnavailable:
        states = ", ".join(f"{e.engine_id} ({e.url}) {e.state}: {e.error or 'tried'}" for e in self.engines)
        return BackendUnavailable(
            f"no engine can take this call ({states or 'the gateway has no engine'}); the session is kept, "
            "retry after a moment (GET /admin/engines shows each engine's state)",
            retry_after_s=self._retry_after_s,
            code="no_engine_up",
        )
