"""Program-aware admission: an agent's episode (a session) is admitted whole, at its first call.

An engine schedules calls; an episode is many calls with tool waits between them, and its
cache is worth keeping across those waits. Past what the engines can hold, admitting one more
episode evicts a waiting one's cache, which it prefills again at its next call, and throughput
falls off a cliff. So the gateway counts the programs it has admitted (sessions that made a
call and are not finished) and the tokens each holds (its longest call's prompt and reply), and
holds a new session's first call while one more would not fit the budget: at most `programs`
running, and their tokens (each at least what a program is expected to grow to: the mean peak
of those that finished) plus one more program's expected size within `tokens`. The budget is
fixed (`--admission-programs N`) or read from the engines (`auto`: `admission_budget.EngineBudget`).

Programs grow after they are admitted. When the running ones hold more tokens than the budget,
the next one to call (at a request boundary, as Relax's RFC #81 puts it) is paused: out of the
running ones, its call held until it fits again at its own size (`resumed`), while its cache may
go; the program admitted first is never paused, so one always goes on. Otherwise the later calls
of an admitted session go through, so a program never waits on itself, and a program alone
always fits. Fail-open: a call held `max_wait_s` goes through anyway (`let_through`), and a
program with no call for `idle_s` no longer counts (its harness may never finish it).

    admission = Admission(FixedBudget(programs=16), max_wait_s=30.0, idle_s=300.0)
    outcome = await admission.admit(session_id)   # "admitted", "running", "deferred", "resumed", "let_through"
    outcome = await admission.admit_now(session_id) or await admission.wait_turn(session_id)  # in two steps
    admission.note(session_id, tokens)            # each recorded call: prompt + reply tokens
    await admission.finish(session_id)            # POST /sessions/{id}/finish
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Literal, Protocol

from roost.rollout.engine_api.capacity import EngineCapacity

Outcome = Literal["admitted", "deferred", "let_through", "running", "paused", "resumed"]
PEAKS_KEPT = 256  # finished programs whose peak tokens make the expected size of a new one
POLL_S = 1.0  # a held first call looks again this often (idle programs expire, engines report anew)


class Budget(Protocol):
    async def capacity(self) -> EngineCapacity:
        """How much may run at once now."""
        ...


class Admission:
    def __init__(
        self, budget: Budget, max_wait_s: float, idle_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.budget = budget
        self.max_wait_s = max_wait_s
        self.idle_s = idle_s
        self._clock = clock
        self._active: dict[str, float] = {}
        """admitted session → when it last called"""
        self._tokens: dict[str, int] = {}
        """admitted session → the most tokens one of its calls held (prompt and reply)"""
        self._peaks: deque[int] = deque(maxlen=PEAKS_KEPT)
        self._paused: dict[str, int] = {}
        """paused session → the tokens it held when paused (its size when it comes back)"""
        self._changed = asyncio.Condition()
        self.waiting = 0
        self.counts: dict[str, int] = dict.fromkeys(("admitted", "deferred", "let_through", "paused", "resumed"), 0)

    @property
    def active(self) -> int:
        self._expire()
        return len(self._active)

    @property
    def held_tokens(self) -> int:
        self._expire()
        return sum(self._tokens.get(s, 0) for s in self._active)

    @property
    def expected_tokens(self) -> int:
        """What a new program is expected to hold at its largest: the mean peak of the finished
        ones, else of the running ones, else nothing known (0)."""
        peaks = self._peaks or [self._tokens[s] for s in self._active if s in self._tokens]
        return round(sum(peaks) / len(peaks)) if peaks else 0

    @property
    def committed_tokens(self) -> int:
        """What the running programs are taken to need: each its own tokens, or the expected size
        while it holds less (it will grow: a program admitted a moment ago holds nothing yet)."""
        self._expire()
        expected = self.expected_tokens
        return sum(max(self._tokens.get(s, 0), expected) for s in self._active)

    def room(self, capacity: EngineCapacity) -> int | None:
        """How many more programs fit `capacity` now (None: it bounds nothing), for a runner
        choosing how many episodes to start."""
        counts = []
        if capacity.programs is not None:
            counts.append(capacity.programs - self.active)
        if capacity.tokens is not None:
            per = max(self.expected_tokens, 1)
            counts.append((capacity.tokens - self.committed_tokens) // per)
        return max(0, min(counts)) if counts else None

    async def admit(self, session_id: str) -> Outcome:
        """Return once `session_id` may call: at once for a running program or while it fits;
        else when a program finishes and it fits, or after `max_wait_s` (fail-open)."""
        return await self.admit_now(session_id) or await self.wait_turn(session_id)

    async def admit_now(self, session_id: str) -> Outcome | None:
        """`running` or `admitted` when `session_id` may call at once; None: it must `wait_turn`
        (a first call that does not fit, or a running program paused). Apart from `admit` so a
        caller can time (and trace) only the calls that wait."""
        capacity = await self.capacity()
        if session_id in self._active:
            self._active[session_id] = self._clock()
            if not self._overcommitted(capacity) or self._oldest() == session_id:
                return "running"
            self._pause(session_id)
            if not self._fits(capacity, session_id):
                self.counts["paused"] += 1
                return None
            self._restore(session_id)  # it fits at its own size beside the others as they are
            return "running"
        return self._enter(session_id, "admitted") if self._fits(capacity) else None

    async def wait_turn(self, session_id: str) -> Outcome:
        """Hold a call until its program fits (`deferred`; a paused one's: `resumed`) or
        `max_wait_s` passed (`let_through`)."""
        deadline = self._clock() + self.max_wait_s
        self.waiting += 1
        try:
            while True:
                capacity = await self.capacity()
                async with self._changed:  # a finish notifies under it: none is missed in between
                    if self._fits(capacity, session_id):
                        return self._enter(session_id, "resumed" if session_id in self._paused else "deferred")
                    left = deadline - self._clock()
                    if left <= 0:
                        return self._enter(session_id, "let_through")
                    try:
                        await asyncio.wait_for(self._changed.wait(), min(left, POLL_S))
                    except TimeoutError:
                        pass  # look again: a program may have gone idle, an engine come up
        finally:
            self.waiting -= 1

    def note(self, session_id: str, tokens: int) -> None:
        """A call of the session was recorded holding `tokens` (prompt and reply)."""
        if session_id in self._active:
            self._tokens[session_id] = max(self._tokens.get(session_id, 0), tokens)

    async def finish(self, session_id: str) -> None:
        """The program is over: its place goes to the next first call waiting."""
        self._paused.pop(session_id, None)
        if self._active.pop(session_id, None) is not None:
            peak = self._tokens.pop(session_id, None)
            if peak:
                self._peaks.append(peak)
            async with self._changed:
                self._changed.notify_all()

    async def capacity(self) -> EngineCapacity:
        """The budget now."""
        return await self.budget.capacity()

    def _fits(self, capacity: EngineCapacity, session_id: str | None = None) -> bool:
        """Whether one more program fits: a new one at its expected size, a paused one at its own."""
        if not self.active:
            return True  # a program alone always runs: no budget may starve everything
        if capacity.programs is not None and self.active >= capacity.programs:
            return False
        size = max(self._paused.get(session_id, 0), self.expected_tokens) if session_id else self.expected_tokens
        return capacity.tokens is None or self.committed_tokens + size <= capacity.tokens

    def is_paused(self, session_id: str) -> bool:
        return session_id in self._paused

    def _overcommitted(self, capacity: EngineCapacity) -> bool:
        """The running programs grew past the token budget (they were admitted smaller)."""
        return capacity.tokens is not None and self.committed_tokens > capacity.tokens

    def _oldest(self) -> str | None:
        """The program admitted first: it always goes on, so pausing never stops every program."""
        return next(iter(self._active), None)

    def _pause(self, session_id: str) -> None:
        """Out of the running ones at a call's boundary, keeping its size for its return."""
        del self._active[session_id]
        self._paused[session_id] = self._tokens.pop(session_id, 0)

    def _enter(self, session_id: str, outcome: Outcome) -> Outcome:
        self._restore(session_id)
        self.counts[outcome] += 1
        return outcome

    def _restore(self, session_id: str) -> None:
        """Among the running programs, with the size it held when paused (if it was)."""
        self._active[session_id] = self._clock()
        size = self._paused.pop(session_id, None)
        if size:
            self._tokens[session_id] = size

    def _expire(self) -> None:
        cutoff = self._clock() - self.idle_s
        for sid in [s for s, seen in self._active.items() if seen < cutoff]:
            del self._active[sid]
            self._tokens.pop(sid, None)
