"""A roost server (`roost engine`, `roost gateway`, ...) in a subprocess on 127.0.0.1.

Tests, benchmarks and the demo start real servers this way; the process is stopped
(terminate, then kill) when the context exits, and dies with this process if it is killed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx

from roost.lifetime import die_with_parent, stop_process


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class ServerStartError(RuntimeError):
    """A server process exited, or never answered /health, while starting."""


def is_healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def wait_healthy(process: subprocess.Popen, url: str, name: str, timeout_s: float, *, see: str = "") -> None:
    """Return once `url`/health answers 200; kill `process` and raise `ServerStartError` if it exits
    first or `timeout_s` passes (`see` points at its log)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerStartError(f"{name} exited with {process.returncode} before answering {url}/health{see}")
        if is_healthy(url):
            return
        time.sleep(0.1)
    stop_process(process, timeout_s=5.0)
    raise ServerStartError(f"{name} did not answer {url}/health within {timeout_s:.0f}s{see}")


class ServerProcess:
    """`roost SUBCOMMAND --port P ARGS...` in a subprocess; a context manager yielding its URL."""

    def __init__(self, subcommand: str, args: list[str], *, port: int | None = None,
                 startup_timeout_s: float = 120.0, env: dict[str, str] | None = None):
        self.name = subcommand
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [sys.executable, "-m", "roost.cli.main", subcommand, "--port", str(self.port), *args]
        self.startup_timeout_s = startup_timeout_s
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen | None = None

    def start(self) -> str:
        self.process = subprocess.Popen(self.args, env=self.env, preexec_fn=die_with_parent())
        try:
            wait_healthy(self.process, self.url, self.name, self.startup_timeout_s)
        except BaseException:  # a SIGTERM or Ctrl-C while it starts: __exit__ will not run
            self.stop()
            raise
        return self.url

    def stop(self) -> None:
        stop_process(self.process)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
