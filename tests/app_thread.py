"""An ASGI app served by uvicorn on 127.0.0.1 in a background thread of the test process."""

from __future__ import annotations

import asyncio
import socket
import threading

import uvicorn


class AppThread:
    """A real server for `app` on a free 127.0.0.1 port; a context manager; `.url`."""

    def __init__(self, app, name: str = "the server"):
        self.name = name
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve(sockets=[self.sock])), daemon=True)

    def __enter__(self):
        self.thread.start()
        for _ in range(200):
            if self.server.started:
                return self
            self.thread.join(0.05)
        raise RuntimeError(f"{self.name} did not start in 10 s")

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
