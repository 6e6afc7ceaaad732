"""An ASGI app served by uvicorn in a background thread of this process (tests, in-process
harness checks), on a socket it binds itself (port 0 by default); a `ServerHandle`."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from .handle import ServerStartError, is_healthy
from .listen import bind_listener, bound_port


class UvicornThread:
    """`uvicorn.Server(config)` on `config.host`:`port` in a daemon thread with its own asyncio
    loop; `url` names the port it bound. `port` 0 (the default): any free one; `config.port`
    is not used (uvicorn's default, 8000, would be every thread's).

    >>> with UvicornThread(uvicorn.Config(app, log_level="warning"), "the server") as url: ...
    """

    def __init__(self, config: Any, name: str = "the server", startup_timeout_s: float = 60.0, *, port: int = 0):
        import uvicorn

        config.loop = "asyncio"  # the thread runs its own plain asyncio loop
        self.name = name
        self.server = uvicorn.Server(config)
        self.startup_timeout_s = startup_timeout_s
        self._host = config.host
        self._sock = bind_listener(config.host, port)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self._host}:{bound_port(self._sock)}"

    def start(self) -> str:
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self.server.serve(sockets=[self._sock])), name=self.name, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not self.server.started:
            if not self._thread.is_alive():
                raise ServerStartError(f"{self.name} exited while starting (see the log above)")
            if time.monotonic() > deadline:
                self.stop()
                raise ServerStartError(f"{self.name} did not start within {self.startup_timeout_s:.0f}s")
            time.sleep(0.02)
        return self.url

    def healthy(self) -> bool:
        return is_healthy(self.url)

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._sock.close()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
