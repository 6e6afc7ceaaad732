"""The control writes a gateway worker that comes back must take before it serves: the last
pause or resume, the last weight version, and every engine added or removed, in order.

A write is noted before it is sent to the workers up now, and the list of those workers is read
under the same lock a returning worker is published under; so a write either reaches a worker
with the others, or is in the list that worker takes before it serves. A write every worker
refused is dropped again; one that succeeded replaces the older one of its kind.

    entry = replay.note(method, path, headers, body, lambda: live_workers())  # -> (entry, targets)
    replay.settle(entry, applied=True)
    replay.bring_up(url, publish)        # on the supervisor's thread
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import httpx

log = logging.getLogger("roost.gateway.workers")

T = TypeVar("T")


@dataclass(frozen=True)
class Write:
    serial: int
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def kind(self) -> str:
        """Writes of one kind where only the last counts; an engine's add or removal is its own."""
        if self.path in ("/admin/pause", "/admin/resume"):
            return "pause"
        if self.path == "/admin/weight_version":
            return "weight_version"
        return f"engines-{self.serial}"


class Replay:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writes: list[Write] = []
        self._serials = itertools.count(1)

    def note(
        self, method: str, path: str, headers: dict[str, str], body: bytes, targets: Callable[[], T]
    ) -> tuple[Write, T]:
        """Note a write about to be sent, and read who to send it to (`targets`) in one step."""
        with self._lock:
            write = Write(next(self._serials), method, path, headers, body)
            self._writes.append(write)
            return write, targets()

    def settle(self, write: Write, *, applied: bool) -> None:
        """The workers answered: a write they all refused is dropped; one they took replaces the
        older of its kind."""
        with self._lock:
            if applied:
                self._writes = [w for w in self._writes if w.kind != write.kind or w.serial >= write.serial]
            else:
                self._writes = [w for w in self._writes if w is not write]

    def bring_up(self, url: str, publish: Callable[[], None]) -> None:
        """Send every write to the worker at `url`, then those noted meanwhile, until none is
        new; then `publish` it (under the lock: a write noted after that reaches it directly)."""
        sent = 0
        with httpx.Client(timeout=120.0) as client:
            while True:
                with self._lock:
                    fresh = [w for w in self._writes if w.serial > sent]
                    if not fresh:
                        publish()
                        return
                for write in fresh:
                    _send(client, url, write)
                sent = max(w.serial for w in fresh)


def _send(client: httpx.Client, url: str, write: Write) -> None:
    try:
        answer = client.request(write.method, f"{url}{write.path}", headers=write.headers, content=write.body)
    except httpx.HTTPError as exc:
        log.warning("a returning gateway worker did not take %s %s: %s", write.method, write.path, exc)
        return
    if answer.status_code >= 400:
        log.warning(
            "a returning gateway worker answered %s %s with %d: %s",
            write.method,
            write.path,
            answer.status_code,
            answer.text[:200],
        )
