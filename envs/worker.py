"""Worker processes that host episodes (`python -m roost.envs.worker FD`).

Env code runs in child processes, so a crashing or hanging env (a segfault in a
native planner, an infinite loop) takes down one worker, never the server. Each
worker builds the env factory once and hosts many episodes; requests to one worker
are served one at a time. A worker that dies or stops answering is killed and
replaced, and every episode it hosted ends as an environment fault.

Workers are plain subprocesses talking over a socket pair (not `multiprocessing`
children, which re-import the parent's `__main__`). The parent first sends the
`WorkerConfig` and its `sys.path`; then messages are `(op, episode_id, payload)`
tuples and replies are `("ok", value)` or `("error", code, message)`.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import subprocess
import sys
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from roost.envs.errors import ERRORS_BY_CODE, EnvError, EnvFaultError
from roost.envs.protocol import Env


@dataclass(frozen=True)
class WorkerConfig:
    env: str
    """Registry name or `module:function` entry point."""
    env_kwargs: dict[str, Any]
    start_timeout_s: float = 300.0
    call_timeout_s: float = 120.0


def worker_main(conn: Connection) -> None:
    from roost.envs.registry import load_factory

    loop = asyncio.new_event_loop()
    env_name = "?"
    try:
        config, parent_path = conn.recv()
        env_name = config.env
        sys.path[:0] = [p for p in parent_path if p not in sys.path]
        factory = load_factory(config.env, **config.env_kwargs)
        probe = factory()
        conn.send(("ok", probe.info))
    except BaseException as exc:  # noqa: BLE001 - report any setup failure to the parent
        conn.send(("error", "env_error", f"env {env_name!r} failed to start: {type(exc).__name__}: {exc}"))
        return
    episodes: dict[str, Env] = {}
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
    for env in episodes.values():
        loop.run_until_complete(env.close())


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
    raise ValueError(f"unknown worker op {op!r}")


class WorkerCrashed(EnvFaultError):
    """The worker process died or stopped answering."""


class WorkerHandle:
    """The parent's end of one worker process."""

    def __init__(self, config: WorkerConfig, index: int) -> None:
        self.config = config
        self.index = index
        self.episodes: set[str] = set()
        self.info: Any = None
        self._lock = asyncio.Lock()
        ours, theirs = socket.socketpair()
        self.process = subprocess.Popen([sys.executable, "-m", "roost.envs.worker", str(theirs.fileno())],
                                        pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        theirs.close()
        self._conn = Connection(ours.detach())
        self._conn.send((config, list(sys.path)))

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

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
            self.info = await asyncio.to_thread(self._receive, self.config.start_timeout_s)

    def stop(self, grace_s: float = 5.0) -> None:
        """End the worker the way it ends by itself: its socket closes, it closes its episodes and
        exits, running its exit handlers (an env's temporary folders go); killed if it takes longer."""
        self._conn.close()
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def kill(self) -> None:
        if self.alive:
            self.process.kill()
        self.process.wait(timeout=10)
        self._conn.close()

    def _roundtrip(self, message: tuple) -> Any:
        try:
            self._conn.send(message)
        except (OSError, ValueError) as exc:
            raise WorkerCrashed(f"env worker {self.index} is gone ({exc})") from None
        return self._receive(self.config.call_timeout_s)

    def _receive(self, timeout: float) -> Any:
        try:
            if not self._conn.poll(timeout):
                self.kill()
                raise WorkerCrashed(f"env worker {self.index} did not answer within {timeout:.0f}s; killed it")
            reply = self._conn.recv()
        except (EOFError, OSError, ValueError):
            try:
                code = self.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                code = None
            raise WorkerCrashed(f"env worker {self.index} died (exit code {code})") from None
        if reply[0] == "ok":
            return reply[1]
        _, code, message = reply
        error = ERRORS_BY_CODE.get(code, EnvFaultError)
        raise error(message)


if __name__ == "__main__":
    worker_main(Connection(int(sys.argv[1])))
