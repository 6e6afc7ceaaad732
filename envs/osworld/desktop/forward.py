"""A TCP forwarder: the desktop's DevTools port, held for its whole life, piped to whichever port
the running Chromium bound. Chromium binds a port of its own choosing (`--remote-debugging-port=0`,
so no port is picked before it is bound) and a new one each launch, while OSWorld's getters are
given one port; and Chromium serves DevTools on 127.0.0.1 only (its `--remote-debugging-address`
works headless only), so a container's desktop needs the forward to reach it at all, as OSWorld's
VM does with socat.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

Target = Callable[[], "tuple[str, int] | None"]
"""Where a new connection goes now; None: nowhere yet (Chromium not started)."""


def forward(listen: tuple[str, int], target: Target) -> socket.socket:
    """Accepts on `listen` (port 0: one the OS picks, read from the socket) and pipes each
    connection to `target()`, in daemon threads; the listening socket."""
    server = socket.create_server(listen, reuse_port=False)
    threading.Thread(target=_accept, args=(server, target), daemon=True).start()
    return server


def _accept(server: socket.socket, target: Target) -> None:
    while True:
        try:
            client, _ = server.accept()
        except OSError:
            return  # closed
        address = target()
        try:
            if address is None:
                raise ConnectionRefusedError
            upstream = socket.create_connection(address, timeout=5)
        except OSError:
            client.close()  # Chromium is not running (yet): the caller sees a closed connection
            continue
        upstream.settimeout(None)
        for src, dst in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pipe, args=(src, dst), daemon=True).start()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
