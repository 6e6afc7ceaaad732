"""What admission runs against: a number of programs given by hand, or what the engines report.

`FixedBudget(programs=N)` is `--admission-programs N`. `EngineBudget` is `--admission-programs
auto`: the sum over the engines that take calls (up, or down and maybe back) of what each
reports it can hold (`roost.rollout.engine_api.capacity`: requests at once, KV tokens), asked
again every `ttl_s` so an engine that joins, leaves or restarts changes the budget. An engine
that does not answer keeps its last report; one never heard from adds nothing. `share` is this
gateway process's part (gateway workers each admit against 1/N of the engines).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from roost.rollout.engine_api.capacity import EngineCapacity
from roost.rollout.engine_api.sglang_client import EngineError
from roost.rollout.gateway.core.router import Router

log = logging.getLogger("roost.gateway.admission")
ASK_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class FixedBudget:
    programs: int

    async def capacity(self) -> EngineCapacity:
        return EngineCapacity(programs=self.programs)


class EngineBudget:
    def __init__(
        self, router: Router, share: float = 1.0, ttl_s: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.router = router
        self.share = share
        self.ttl_s = ttl_s
        self._clock = clock
        self._reports: dict[str, EngineCapacity] = {}
        """engine id → what it last reported"""
        self._asked_at = float("-inf")
        self._lock = asyncio.Lock()

    async def capacity(self) -> EngineCapacity:
        async with self._lock:  # one round of questions at a time; the others take its answer
            if self._clock() - self._asked_at >= self.ttl_s:
                await self._ask()
                self._asked_at = self._clock()
        engines = [e.engine_id for e in self.router.engines if e.state != "stale"]
        total = EngineCapacity()
        for engine_id in engines:
            total = total + self._reports.get(engine_id, EngineCapacity())
        return total.share(self.share)

    async def _ask(self) -> None:
        slots = [e for e in self.router.engines if e.state != "stale"]
        answers = await asyncio.gather(
            *(asyncio.wait_for(e.client.capacity(), ASK_TIMEOUT_S) for e in slots), return_exceptions=True
        )
        for slot, answer in zip(slots, answers):
            if isinstance(answer, EngineCapacity):
                self._reports[slot.engine_id] = answer
            elif isinstance(answer, (EngineError, TimeoutError)):
                log.info("engine %s did not report its capacity: %s", slot.engine_id, answer)
            else:  # fail open: a report roost cannot read leaves the budget as it was
                log.warning("engine %s: its capacity report failed: %r", slot.engine_id, answer)
        live = {e.engine_id for e in self.router.engines}
        for gone in [e for e in self._reports if e not in live]:
            del self._reports[gone]
