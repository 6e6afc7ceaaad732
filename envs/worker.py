"""Worker processes that host episodes (`python -m roost.envs.worker FD`).

Env code runs in child processes, so a crashing or hanging env (a segfault in a
native planner, an infinite loop) takes down one worker, never the server. Each
worker builds the env factory once and hosts many episodes; requests to one worker
are served one at a time. A worker that dies, stops answering a request within
`call_timeout_s`, or stops sending heartbeats is killed and replaced, and every
episode it hosted ends as an environment fault.

Workers are plain subprocesses talking over a socket pair (not `multiprocessing`
children, which re-import the parent's `__main__`). The parent first sends the
`WorkerConfig` and its `sys.path`; then messages are `(op, episode_id, payload)`
tuples and replies are `("ok", value)` or `("error", code, message)`. A second socket
pair carries the heartbeat: a byte every `heartbeat_s`, sent by a thread of its own.

A worker stopped with SIGTERM (its server stopping, or dying: workers ask for SIGTERM
when their parent dies) closes its episodes' envs before it exits, so their sandboxes
and containers go with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from roost.envs.errors import ERRORS_BY_CODE, EnvError, EnvFaultError, NoWorkspaceError
from roost.envs.protocol import Env, HasWorkspace
from roost.lifetime import die_with_parent, stop_on_sigterm, stop_process

CLOSE_TIMEOUT_S = 30
"""How long a stopping worker may take to close its episodes' envs."""


@dataclass(frozen=True)
class WorkerConfig:
    env: str
    """Registry name or `module:function` entry point."""
    env_kwargs: dict[str, Any]
    start_timeout_s: float = 300.0
    call_timeout_s: float = 120.0
    hang_timeout_s: float = 10.0
    """A loaded worker that sends no heartbeat for this long is killed (stopped, or stuck in
    native code that holds the GIL; a slow step in Python still beats)."""

    @property
    def heartbeat_s(self) -> float:
        return self.hang_timeout_s / 5  # one late beat is no alarm


def worker_main(conn: Connection, heartbeat: socket.socket) -> None:
    with stop_on_sigterm():
        _serve(conn, heartbeat)


def _serve(conn: Connection, heartbeat: socket.socket) -> None:
    from roost.envs.registry import load_factory

    loop = asyncio.new_event_loop()
    env_name = "?"
    try:
        config, parent_path = conn.recv()
        env_name = config.env
        threading.Thread(target=_beat, args=(heartbeat, config.heartbeat_s), daemon=True).start()
        sys.path[:0] = [p for p in parent_path if p not in sys.path]
        factory = load_factory(config.env, **config.env_kwargs)
        probe = factory()
        conn.send(("ok", probe.info))
    except BaseException as exc:  # noqa: BLE001 - report any setup failure to the parent
        conn.send(("error", "env_error", f"env {env_name!r} failed to start: {type(exc).__name__}: {exc}"))
        return
    episodes: dict[str, Env] = {}
    try:
        while True:
            try:
                op, episode_id, payload = conn.recv()
            except (EOFError, OSError):
                break
            try:
                reply = ("ok", loop.run_until_complete(_handle(op, episode_id, payload, factory, probe, episodes)))
            except EnvError as exc:
                reply = ("error", exc.code, str(exc))
            except Exception as exc:  # noqa: BLE001 - an env bug is an environment fault
                reply = ("error", "env_error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}")
            try:
                conn.send(reply)
            except (TypeError, AttributeError, pickle.PicklingError) as exc:
                conn.send(("error", "env_error", f"env {env_name!r} returned something unpicklable from {op}: {exc}"))
    finally:  # also on SIGTERM, mid-step: the envs' sandboxes must not outlive the worker
        # A SIGTERM now (the parent dying as it closed the pipe) must not cut the closing short:
        # one that lands before it is ignored raises SystemExit here, and the inner `finally`
        # still closes (the handler ignores any later one). A close that hangs must not keep an
        # orphan alive (SIGALRM ends the process).
        try:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        finally:
            signal.alarm(CLOSE_TIMEOUT_S)
            for env in episodes.values():
                with contextlib.suppress(Exception):
                    loop.run_until_complete(env.close())


def _beat(heartbeat: socket.socket, every_s: float) -> None:
    """Tell the parent every `every_s` that this process runs, from a thread of its own."""
    try:
        while True:
            heartbeat.send(b".")
            time.sleep(every_s)
    except OSError:
        return  # the parent is gone


async def _handle(op: str, episode_id: str, payload: Any, factory, probe: Env, episodes: dict[str, Env]) -> Any:
    if op == "reset":
        env = episodes.get(episode_id) or factory()
        episodes[episode_id] = env
        try:
            return await env.reset(**payload)
        except BaseException:
            del episodes[episode_id]
            await env.close()
            raise
    if op == "step":
        return await episodes[episode_id].step(payload)
    if op == "close":
        env = episodes.pop(episode_id, None)
        if env is not None:
            await env.close()
        return None
    if op == "tasks":
        return await probe.tasks(payload)
    if op == "workspace":
        env = episodes[episode_id]
        if not isinstance(env, HasWorkspace):
            raise NoWorkspaceError(f"the {probe.info.name} env's episodes have no workspace to hand out")
        return await env.workspace()
    raise ValueError(f"unknown worker op {op!r}")


class WorkerCrashed(EnvFaultError):
    """The worker process died or stopped answering."""


class WorkerHandle:
    """The parent's end of one worker process. Its heartbeat is read only on the event loop's
    thread (`fault`); `stop` may run in another."""

    def __init__(self, config: WorkerConfig, index: int) -> None:
        self.config = config
        self.index = index
        self.episodes: set[str] = set()
        self.info: Any = None
        self.fate: str | None = None
        """Why the parent killed it: what its cut-short calls report."""
        self._lock = asyncio.Lock()
        self._heard_at = 0.0
        ours, theirs = socket.socketpair()
        self._heartbeat, heartbeat = socket.socketpair()
        fds = [theirs.fileno(), heartbeat.fileno()]
        # stdout=2: what env code prints (OSWorld's getters do) goes to the server's stderr, never
        # into the stdout of a CLI that runs the server in-process (`roost eval --json`)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "roost.envs.worker", *map(str, fds)],
            pass_fds=fds,
            stdin=subprocess.DEVNULL,
            stdout=2,
            preexec_fn=die_with_parent(),
        )
        theirs.close()
        heartbeat.close()
        self._heartbeat.setblocking(False)
        self._conn = Connection(ours.detach())
        self._conn.send((config, list(sys.path)))

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    @property
    def serving(self) -> bool:
        """Its env has loaded and it still runs."""
        return self.info is not None and self.alive

    def fault(self) -> str | None:
        """Why this worker can serve no more (it died, or went silent), or None."""
        code = self.process.poll()
        if code is not None:
            return f"env worker {self.index} died (exit code {code})"
        if self.info is None:
            return None  # still loading its env: `start_timeout_s` bounds that
        with contextlib.suppress(OSError):  # nothing new (BlockingIOError), or it just died
            if self._heartbeat.recv(1 << 12):
                self._heard_at = time.monotonic()
        silent = time.monotonic() - self._heard_at
        if silent > self.config.hang_timeout_s:
            return (
                f"env worker {self.index} sent no heartbeat for {silent:.0f}s (stopped, or stuck in native "
                "code); killed it"
            )
        return None

    async def ready(self) -> Any:
        """Wait for the env factory to load; returns the env's `EnvInfo`."""
        async with self._lock:
            await self._hello()
        return self.info

    async def call(self, op: str, episode_id: str = "", payload: Any = None) -> Any:
        async with self._lock:
            await self._hello()
            return await asyncio.to_thread(self._roundtrip, (op, episode_id, payload))

    async def _hello(self) -> None:
        # The worker's first message says that its env factory loaded (or why it did not).
        if self.info is None:
            info = await asyncio.to_thread(self._receive, self.config.start_timeout_s)
            self._heard_at = time.monotonic()
            self.info = info

    def stop(self, reason: str | None = None, timeout_s: float = 10.0) -> None:
        """End the process and release its sockets. With a `reason` (it is dead, hung or broken:
        what its cut-short calls say) it is killed at once; else SIGTERM lets it close its
        episodes' envs, and it is killed if still there after `timeout_s`."""
        if reason is None:
            stop_process(self.process, timeout_s)
        else:
            self._kill(reason)
        self._conn.close()
        self._heartbeat.close()

    def _kill(self, reason: str) -> None:
        self.fate = self.fate or reason
        if self.alive:
            self.process.kill()
        self.process.wait(timeout=10)

    def _roundtrip(self, message: tuple) -> Any:
        try:
            self._conn.send(message)
        except (OSError, ValueError) as exc:
            raise WorkerCrashed(f"env worker {self.index} is gone ({exc})") from None
        return self._receive(self.config.call_timeout_s)

    def _receive(self, timeout: float) -> Any:
        try:
            if not self._conn.poll(timeout):
                message = f"env worker {self.index} did not answer within {timeout:.0f}s; killed it"
                self._kill(message)
                raise WorkerCrashed(message)
            reply = self._conn.recv()
        except (EOFError, OSError, ValueError):
            try:
                code = self.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                code = None
            raise WorkerCrashed(self.fate or f"env worker {self.index} died (exit code {code})") from None
        if reply[0] == "ok":
            return reply[1]
        _, code, message = reply
        error = ERRORS_BY_CODE.get(code, EnvFaultError)
        raise error(message)


if __name__ == "__main__":
    worker_main(Connection(int(sys.argv[1])), socket.socket(fileno=int(sys.argv[2])))
