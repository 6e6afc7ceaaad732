"""The requests the server has accepted and not yet handed back: each runs as a task, and the SDK
polls `retrieve_future` for it, getting `try_again` until it is done.

Training work runs one request at a time, shared fairly between the SDK's sessions (`FairQueue`:
round-robin between sessions, each session's requests in the order they arrived; the SDK sends a
model's next request only once the previous one was accepted, so that is the order it asked for).
Each request belongs to the tenant (API key) that made it; another tenant's id is unknown to it.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .fair_queue import FairQueue


class RequestFailure(Exception):
    """A request that failed while it ran; `category` is "user" when the caller's input caused it."""

    def __init__(self, message: str, category: str = "user"):
        super().__init__(message)
        self.category = category


@dataclass
class Outcome:
    """What a finished request hands back: a JSON body or protobuf bytes."""

    json: dict[str, Any] | None = None
    proto: bytes | None = None


class FutureQueue:
    """Request id → the task computing its outcome; work with a `lane` (its session) runs one at a
    time through the `FairQueue`, other work (sampling) at once.

    An outcome stays retrievable for `keep_s` after it was first handed back: the SDK retries a
    `retrieve_future` whose answer it did not get (a dropped connection), and must get the same
    answer, not a 404."""

    def __init__(self, keep_s: float = 300.0) -> None:
        self._tasks: dict[str, asyncio.Task[Outcome]] = {}
        self._tenants: dict[str, str] = {}
        self._taken: dict[str, float] = {}
        self._keep_s = keep_s
        self.training = FairQueue()
        self._ids = itertools.count(1)

    def submit(
        self, work: Callable[[], Awaitable[Outcome]], *, tenant: str, lane: str | None = None, label: str = ""
    ) -> str:
        """Start `work` for `tenant`; with a `lane`, as its turn comes in the training queue."""
        self._forget_old()
        request_id = f"req-{next(self._ids)}"
        run = work() if lane is None else self.training.run(lane, f"{label} {request_id}".strip(), work)
        self._tasks[request_id] = asyncio.get_running_loop().create_task(run)
        self._tenants[request_id] = tenant
        return request_id

    def known(self, request_id: str, tenant: str) -> bool:
        """Whether `request_id` is a request of `tenant`'s (another tenant's is unknown to it)."""
        return self._tenants.get(request_id) == tenant

    async def wait(self, request_id: str, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the request to finish; whether it has."""
        task = self._tasks[request_id]
        await asyncio.wait([task], timeout=timeout_s)
        return task.done()

    def take(self, request_id: str) -> Outcome:
        """The finished request's outcome (raising what it raised); forgotten `keep_s` after first taken."""
        self._taken.setdefault(request_id, time.monotonic())
        return self._tasks[request_id].result()

    def _forget_old(self) -> None:
        cutoff = time.monotonic() - self._keep_s
        for request_id in [r for r, at in self._taken.items() if at < cutoff]:
            del self._taken[request_id], self._tasks[request_id], self._tenants[request_id]

    def cancel_all(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        self.training.close()
