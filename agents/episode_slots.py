"""How many episodes the runner plays at once: a fixed number, or as many as the gateway admits.

With program-aware admission on (`roost gateway --admission-programs N|auto`), the gateway
holds a new session's first call while one more program would not fit its engines. A runner
that started more episodes than that would only park them at the gateway, each holding an env
episode (a container, a desktop) while it waits. Following the admission, the runner starts an
episode while fewer than `most` run and fewer than the gateway has room for: the programs
running there, the `room` its `/health` reports, and one more, ready when a place frees up (it
waits at the gateway, not here). Without admission on, or with a budget that bounds nothing, it
is `most` at once.

    slots = EpisodeSlots(most=64, gateway=gateway)   # gateway: a GatewayClient, or None
    async with slots:
        await run_episode(...)
"""

from __future__ import annotations

import asyncio
import logging
import time

from roost.rollout.gateway.control.client import ControlPlaneError, GatewayClient

log = logging.getLogger(__name__)
ASK_EVERY_S = 0.5  # how stale the gateway's room may be
READY = 1  # episodes started beyond what the gateway has room for, waiting at its door


class EpisodeSlots:
    def __init__(self, most: int, gateway: GatewayClient | None = None, poll_s: float = ASK_EVERY_S) -> None:
        self.most = most
        self.gateway = gateway
        self.poll_s = poll_s
        self.running = 0
        self._target = most
        self._asked_at = float("-inf")
        self._freed = asyncio.Event()
        self._asking = asyncio.Lock()

    async def __aenter__(self) -> EpisodeSlots:
        while True:
            limit = min(self.most, await self.target())
            if self.running < limit:  # nothing awaited between this check and the count
                self.running += 1
                return self
            self._freed.clear()
            try:
                await asyncio.wait_for(self._freed.wait(), self.poll_s)
            except TimeoutError:
                pass  # ask again: the gateway's room changes with other runners' episodes too

    async def __aexit__(self, *exc: object) -> None:
        self.running -= 1
        self._freed.set()

    async def target(self) -> int:
        """Episodes that may run now: the gateway's running programs and room, plus `READY`."""
        if self.gateway is None:
            return self.most
        async with self._asking:  # the others wait for this answer rather than take a stale one
            if time.monotonic() - self._asked_at >= self.poll_s:
                await self._ask(self.gateway)
                self._asked_at = time.monotonic()
        return self._target

    async def _ask(self, gateway: GatewayClient) -> None:
        try:
            admission = (await gateway.health()).admission
        except ControlPlaneError as exc:
            log.info("gateway health unreadable, keeping %d episodes at once: %s", self._target, exc)
            return
        if admission is None or admission.room is None:
            self._target = self.most
        else:
            self._target = max(1, admission.programs_running + admission.room + READY)
