"""Pausing for a weight update: new calls wait (bounded), calls in flight finish."""

from __future__ import annotations

import asyncio

from roost.rollout.gateway.core.errors import GatewayPaused


class PauseGate:
    def __init__(self, max_wait_s: float, retry_after_s: int):
        self.max_wait_s = max_wait_s
        self.retry_after_s = retry_after_s
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self.in_flight = 0

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    async def enter(self) -> None:
        if not self._open.is_set():
            try:
                await asyncio.wait_for(self._open.wait(), self.max_wait_s)
            except TimeoutError:
                raise GatewayPaused(
                    f"the gateway is paused (weight update) and did not resume within {self.max_wait_s:g}s; "
                    "retry after the update",
                    retry_after_s=self.retry_after_s,
                ) from None
        self.in_flight += 1
        self._idle.clear()

    def exit(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()

    def pause(self) -> None:
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    async def drained(self, timeout_s: float) -> bool:
        """Wait until no call is in flight; False if `timeout_s` passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True
