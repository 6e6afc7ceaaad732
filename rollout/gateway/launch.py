"""Serving the gateway: in this process (uvicorn), on a background thread (tests), or
as a `roost gateway` subprocess (benchmarks, crash tests)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time

import httpx

from .config import GatewayConfig


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _uvicorn_config(config: GatewayConfig, log_level: str):
    import uvicorn

    from .app import create_app

    loop = "uvloop" if _has("uvloop") else "asyncio"
    http = "httptools" if _has("httptools") else "h11"
    return uvicorn.Config(create_app(config), host=config.host, port=config.port, loop=loop, http=http,
                          log_level=log_level, access_log=False, backlog=4096, timeout_keep_alive=30)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def serve(config: GatewayConfig, log_level: str = "warning") -> None:
    import uvicorn

    uvicorn.Server(_uvicorn_config(config, log_level)).run()


class GatewayThread:
    """A real gateway on 127.0.0.1 in a background thread of this process; a context manager.

    >>> with GatewayThread(GatewayConfig(engine_url=..., model="tiny", store_path=...)) as url: ...
    """

    def __init__(self, config: GatewayConfig, startup_timeout_s: float = 60.0):
        if config.port in (0, 8000):
            config = config.model_copy(update={"port": free_port()})
        self.config = config
        self.url = f"http://{config.host}:{config.port}"
        self.startup_timeout_s = startup_timeout_s
        self._server = None
        self._thread: threading.Thread | None = None

    @property
    def gateway(self):
        return self._server.config.app.state.gateway

    def start(self) -> str:
        import uvicorn

        self._server = uvicorn.Server(_uvicorn_config(self.config, "warning"))
        self._server.config.loop = "asyncio"  # the thread runs its own plain asyncio loop
        self._thread = threading.Thread(target=lambda: asyncio.run(self._server.serve()), daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the gateway thread exited during startup (see the log above)")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the gateway did not start within {self.startup_timeout_s}s")
            time.sleep(0.02)
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class GatewayProcess:
    """`roost gateway ...` in a subprocess on a free port; a context manager."""

    def __init__(self, args: list[str], *, port: int | None = None, startup_timeout_s: float = 120.0):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [sys.executable, "-m", "roost.cli.main", "gateway", "--port", str(self.port), *args]
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen | None = None

    def start(self) -> str:
        self.process = subprocess.Popen(self.args, env=dict(os.environ))
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gateway exited with {self.process.returncode} before answering /health")
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return self.url
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"gateway did not answer {self.url}/health within {self.startup_timeout_s}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
