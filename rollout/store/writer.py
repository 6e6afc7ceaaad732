"""One writer thread that commits SQLite writes in groups.

Every call is committed before its response goes out, but committing each call in its own
transaction would cap the gateway at a few thousand calls a second and hold the event loop.
Instead the loop hands each write to this thread and awaits a future; the thread takes
whatever has queued up, runs it in one transaction (a savepoint per write, so one bad
write fails alone), commits once, and resolves all the futures together.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
Op = Callable[[sqlite3.Connection], Any]
_Item = tuple[Op, "asyncio.Future[Any]", asyncio.AbstractEventLoop]
"""A queued write: the op, the future its caller awaits, and that caller's loop."""
_Done = tuple["asyncio.Future[Any]", Any, BaseException | None]


class StoreClosed(RuntimeError):
    """A write was submitted after the store was closed."""


class GroupCommitWriter:
    def __init__(self, connect: Callable[[], sqlite3.Connection], *, max_batch: int = 1024):
        self._connect = connect
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()  # None: stop
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self.batches = 0
        self.writes = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="roost-store-writer", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            raise self._startup_error

    def submit(self, op: Op) -> asyncio.Future[Any]:
        """Queue `op(connection)`; the future resolves (on the calling loop) after commit."""
        if self._thread is None or not self._thread.is_alive():
            raise StoreClosed("the trajectory store is closed; no call can be recorded")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put((op, future, loop))
        return future

    def close(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _run(self) -> None:
        try:
            conn = self._connect()
        except BaseException as exc:  # reported to start()
            self._startup_error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            while True:
                first = self._queue.get()
                if first is None:
                    return
                batch = [first]
                stop = False
                while len(batch) < self._max_batch:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is None:
                        stop = True
                        break
                    batch.append(item)
                self._commit(conn, batch)
                if stop:
                    return
        finally:
            conn.close()

    def _commit(self, conn: sqlite3.Connection, batch: list[_Item]) -> None:
        outcomes: list[tuple[Any, Any, BaseException | None]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for op, *_ in batch:
                outcomes.append(_run_one(conn, op))
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            outcomes = [(None, None, exc)] * len(batch)
        self.batches += 1
        self.writes += len(batch)
        by_loop: dict[asyncio.AbstractEventLoop, list[_Done]] = {}
        for (_op, waiter, loop), (_, value, error) in zip(batch, outcomes):
            by_loop.setdefault(loop, []).append((waiter, value, error))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_resolve, items)
            except RuntimeError:  # that loop has closed; nobody is waiting any more
                pass


def _run_one(conn: sqlite3.Connection, op: Op) -> tuple[None, Any, BaseException | None]:
    conn.execute("SAVEPOINT op")
    try:
        value = op(conn)
    except Exception as exc:
        conn.execute("ROLLBACK TO op")
        conn.execute("RELEASE op")
        return None, None, exc
    conn.execute("RELEASE op")
    return None, value, None


def _resolve(items: list[_Done]) -> None:
    for future, value, error in items:
        if future.done():  # the awaiting request was cancelled
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
