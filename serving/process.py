"""A roost server (`roost engine`, `roost gateway`, ...) in a subprocess on 127.0.0.1.

Tests, benchmarks and the demo start real servers this way; the server binds port 0 and
reports the port it got (`--port-file`), and the process is stopped (terminate, then kill)
when the context exits, and dies with this process if it is killed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from roost.lifetime import die_with_parent, stop_process

from .handle import ServerStartError, is_healthy
from .listen import read_port


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


def start_reporting(
    command: list[str],
    port_file: Path,
    name: str,
    timeout_s: float,
    *,
    host: str = "127.0.0.1",
    see: str = "",
    **popen: object,
) -> tuple[subprocess.Popen, int]:
    """Start `command` (which ends in `--port-file port_file`), wait for the port it reports and
    then for its /health; the process and its port. The process dies with this thread."""
    process = launch_reporting(command, port_file, **popen)
    return process, await_reporting(process, port_file, name, timeout_s, host=host, see=see)


def launch_reporting(command: list[str], port_file: Path, **popen: object) -> subprocess.Popen:
    """`start_reporting`'s first half: start `command`, which will report its port in `port_file`
    (several servers may be launched so, then awaited, to load at once)."""
    port_file.unlink(missing_ok=True)
    return subprocess.Popen(command, preexec_fn=die_with_parent(), **popen)  # type: ignore[call-overload]


def await_reporting(
    process: subprocess.Popen, port_file: Path, name: str, timeout_s: float, *, host: str = "127.0.0.1", see: str = ""
) -> int:
    """`start_reporting`'s second half: the port `process` reported, once its /health answers; the
    process is stopped when it does not within `timeout_s`."""
    try:
        deadline = time.monotonic() + timeout_s
        port = read_port(process, port_file, name, timeout_s, see=see)
        wait_healthy(process, f"http://{host}:{port}", name, max(1.0, deadline - time.monotonic()), see=see)
    except BaseException:  # a SIGTERM or Ctrl-C while it starts: the caller's cleanup may not run
        stop_process(process, timeout_s=5.0)
        raise
    return port


def roost_command(subcommand: str, port: int, port_file: Path, args: list[str]) -> list[str]:
    """`python -m roost.cli.main SUBCOMMAND --port P --port-file F ARGS...` with this Python."""
    return [
        sys.executable,
        "-m",
        "roost.cli.main",
        subcommand,
        "--port",
        str(port),
        "--port-file",
        str(port_file),
        *args,
    ]


class ServerProcess:
    """`roost SUBCOMMAND --port P --port-file F ARGS...` in a subprocess; a `ServerHandle`.
    `port` 0 (the default) lets the server take any free port; `url` names the one it got."""

    def __init__(
        self,
        subcommand: str,
        args: list[str],
        *,
        port: int = 0,
        startup_timeout_s: float = 120.0,
        env: dict[str, str] | None = None,
    ):
        self.name = subcommand
        self.port = port
        self.args = args
        self.startup_timeout_s = startup_timeout_s
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen | None = None
        self._folder: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self, port_file: Path) -> list[str]:
        return roost_command(self.name, self.port, port_file, self.args)

    def start(self) -> str:
        self._folder = tempfile.mkdtemp(prefix=f"roost-{self.name}-")
        port_file = Path(self._folder) / "port"
        try:
            self.process, self.port = start_reporting(
                self.command(port_file), port_file, self.name, self.startup_timeout_s, env=self.env
            )
        except BaseException:
            self.stop()
            raise
        return self.url

    def healthy(self) -> bool:
        return is_healthy(self.url)

    def stop(self) -> None:
        stop_process(self.process)
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
