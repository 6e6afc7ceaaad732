"""Serial work shared fairly between lanes (the SDK's sessions): one item runs at a time, lanes take
turns round-robin, and each lane's own items run in the order they came.

A lane that has just run goes to the back of the turn order, behind every lane that was waiting,
so a session that queued twenty requests delays another session's one by at most the request
running when it arrived.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class _Item:
    label: str
    work: Callable[[], Awaitable[Any]]
    done: asyncio.Future[Any]


class FairQueue:
    """Lane name → its waiting items; `run(lane, label, work)` waits for the item's turn, runs it
    and hands back what it returned (or raises what it raised)."""

    def __init__(self) -> None:
        self._lanes: dict[str, deque[_Item]] = {}
        self._turns: deque[str] = deque()
        """Lanes with items waiting, in the order they get their next turn."""
        self._running: str | None = None
        self._runner: asyncio.Task[None] | None = None

    async def run(self, lane: str, label: str, work: Callable[[], Awaitable[Any]]) -> Any:
        item = _Item(label, work, asyncio.get_running_loop().create_future())
        waiting = self._lanes.setdefault(lane, deque())
        if not waiting and lane != self._running:
            self._turns.append(lane)
        waiting.append(item)
        log.info("training queue: queued %s of %s (%d waiting in its lane)", label, lane, len(waiting))
        if self._runner is None or self._runner.done():
            self._runner = asyncio.get_running_loop().create_task(self._run_all())
        return await item.done

    async def _run_all(self) -> None:
        while self._turns:
            lane = self._turns.popleft()
            item = self._lanes[lane].popleft()
            self._running = lane
            try:
                await self._run_one(lane, item)
            finally:
                self._running = None
                self._next_turn(lane)

    def _next_turn(self, lane: str) -> None:
        # Behind every lane that waited meanwhile: the round-robin that keeps one lane from starving others.
        if self._lanes[lane]:
            self._turns.append(lane)
        else:
            del self._lanes[lane]

    async def _run_one(self, lane: str, item: _Item) -> None:
        if item.done.done():  # its caller was cancelled while it waited
            return
        log.info("training queue: runs %s of %s", item.label, lane)
        try:
            result = await item.work()
        except Exception as exc:
            if not item.done.done():
                item.done.set_exception(exc)
        else:
            if not item.done.done():
                item.done.set_result(result)

    def close(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
