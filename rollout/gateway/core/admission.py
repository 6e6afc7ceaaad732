"""Program-aware admission: an agent's episode (a session) is admitted whole, at its first call.

An engine schedules calls; an episode is many calls with tool waits between them, and its
cache is worth keeping across those waits. Past what the engines can hold, admitting one more
episode evicts a waiting one's cache, which it prefills again at its next call, and throughput
falls off a cliff. So the gateway counts the programs it has admitted (sessions that made a
call and are not finished) and holds a new session's first call while `programs` are running,
until one finishes. The later calls of an admitted session always go through, so a program never
waits on itself. Fail-open: a first call held `max_wait_s` goes through anyway (`let_through`),
and a program with no call for `idle_s` no longer counts (its harness may never finish it).

    admission = Admission(programs=16, max_wait_s=30.0, idle_s=300.0)
    outcome = await admission.admit(session_id)   # "admitted", "deferred" (waited), "let_through"
    outcome = admission.admit_now(session_id) or await admission.wait_turn(session_id)  # the same, in two steps
    await admission.finish(session_id)            # POST /sessions/{id}/finish
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Literal

Outcome = Literal["admitted", "deferred", "let_through", "running"]


class Admission:
    def __init__(
        self, programs: int, max_wait_s: float, idle_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.programs = programs
        self.max_wait_s = max_wait_s
        self.idle_s = idle_s
        self._clock = clock
        self._active: dict[str, float] = {}
        """admitted session → when it last called"""
        self._changed = asyncio.Condition()
        self.waiting = 0
        self.counts: dict[str, int] = {"admitted": 0, "deferred": 0, "let_through": 0}

    @property
    def active(self) -> int:
        self._expire()
        return len(self._active)

    async def admit(self, session_id: str) -> Outcome:
        """Return once `session_id` may call: at once for a running program or while there is
        room; else when a program finishes, or after `max_wait_s` (fail-open)."""
        return self.admit_now(session_id) or await self.wait_turn(session_id)

    def admit_now(self, session_id: str) -> Outcome | None:
        """`running` or `admitted` when `session_id` may call at once; None: it must `wait_turn`.
        Apart from `admit` so a caller can time (and trace) only the calls that wait."""
        if session_id in self._active:
            self._active[session_id] = self._clock()
            return "running"
        if self.active < self.programs:
            return self._enter(session_id, "admitted")
        return None

    async def wait_turn(self, session_id: str) -> Outcome:
        """Hold a first call until a program finishes (`deferred`) or `max_wait_s` passed (`let_through`)."""
        deadline = self._clock() + self.max_wait_s
        self.waiting += 1
        try:
            async with self._changed:
                while self.active >= self.programs:
                    left = deadline - self._clock()
                    if left <= 0:
                        return self._enter(session_id, "let_through")
                    try:
                        await asyncio.wait_for(self._changed.wait(), min(left, max(self.idle_s / 4, 0.05)))
                    except TimeoutError:
                        pass  # look again: a program may have gone idle
                return self._enter(session_id, "deferred")
        finally:
            self.waiting -= 1

    async def finish(self, session_id: str) -> None:
        """The program is over: its place goes to the next first call waiting."""
        if self._active.pop(session_id, None) is not None:
            async with self._changed:
                self._changed.notify_all()

    def _enter(self, session_id: str, outcome: Outcome) -> Outcome:
        self._active[session_id] = self._clock()
        self.counts[outcome] += 1
        return outcome

    def _expire(self) -> None:
        cutoff = self._clock() - self.idle_s
        for sid in [s for s, seen in self._active.items() if seen < cutoff]:
            del self._active[sid]
