"""Serving the gateway: in this process (uvicorn), on a background thread (tests), or
as a `roost gateway` subprocess (benchmarks, crash tests)."""

from __future__ import annotations

import asyncio
import threading
import time

from roost.rollout.keys import ADMIN_KEY, new_key
from roost.rollout.server_process import ServerProcess, free_port

from .config import GatewayConfig


def _uvicorn_config(config: GatewayConfig):
    import uvicorn

    from .app import create_app

    loop = "uvloop" if _has("uvloop") else "asyncio"
    http = "httptools" if _has("httptools") else "h11"
    return uvicorn.Config(create_app(config), host=config.host, port=config.port, loop=loop, http=http,
                          log_config=None, access_log=False, backlog=4096, timeout_keep_alive=30)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def serve(config: GatewayConfig) -> None:
    """Serve until stopped; logs go where the process's logging sends them (`roost.logging_setup`)."""
    import uvicorn

    uvicorn.Server(_uvicorn_config(config)).run()


class GatewayThread:
    """A real gateway on 127.0.0.1 in a background thread of this process; a context manager.
    `admin_key` is the key of its control plane (the config's, generated unless given).

    >>> with GatewayThread(GatewayConfig(engine_url=..., model="tiny", store_path=...)) as url: ...
    """

    def __init__(self, config: GatewayConfig, startup_timeout_s: float = 60.0):
        if config.port in (0, 8000):
            config = config.model_copy(update={"port": free_port()})
        self.config = config
        self.admin_key = config.admin_key
        self.url = f"http://{config.host}:{config.port}"
        self.startup_timeout_s = startup_timeout_s
        self._server = None
        self._thread: threading.Thread | None = None

    @property
    def gateway(self):
        return self._server.config.app.state.gateway

    def start(self) -> str:
        import uvicorn

        self._server = uvicorn.Server(_uvicorn_config(self.config))
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


class GatewayProcess(ServerProcess):
    """`roost gateway ...` in a subprocess on a free port; a context manager. `admin_key` is the
    key of its control plane (generated here, handed over in the environment)."""

    def __init__(self, args: list[str], *, port: int | None = None, startup_timeout_s: float = 120.0):
        self.admin_key = new_key(ADMIN_KEY)
        super().__init__("gateway", args, port=port, startup_timeout_s=startup_timeout_s,
                         env={ADMIN_KEY.env: self.admin_key})
