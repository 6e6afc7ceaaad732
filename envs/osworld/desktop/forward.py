"""A TCP forwarder: Chromium serves DevTools on 127.0.0.1 only (its `--remote-debugging-address`
works headless only), so a container's desktop forwards its public DevTools port to it, as
OSWorld's VM does with socat.
"""

from __future__ import annotations

import socket
import threading


def forward(listen: tuple[str, int], target: tuple[str, int]) -> socket.socket:
    """Accepts on `listen` and pipes each connection to `target`, in daemon threads; the socket."""
    server = socket.create_server(listen, reuse_port=False)
    threading.Thread(target=_accept, args=(server, target), daemon=True).start()
    return server


def _accept(server: socket.socket, target: tuple[str, int]) -> None:
    while True:
        try:
            client, _ = server.accept()
        except OSError:
            return  # closed
        try:
            upstream = socket.create_connection(target, timeout=5)
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
