"""A server's listening socket, bound by the server itself, and the port it reports.

A launcher never picks a port for a server: "find a free port, then start the server on it"
loses the port whenever something else binds it in between (EADDRINUSE, seen in CI). A
server binds port 0 (the OS picks one and holds it from then on), writes the port it got to
the file its launcher named (`--port-file`), then serves on that very socket:

    sock = bind_listener(host, port)               # port 0: any free one
    report_port(sock, port_file)                    # the launcher reads it with `read_port`
    uvicorn.Server(uvicorn.Config(app, ...)).run(sockets=[sock])
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

from .handle import ServerStartError

PORT_FILE_HELP = "Write the port bound to this file once listening (with --port 0: the one the OS picked)."


def bind_listener(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A TCP socket bound to `host:port` (0: the OS picks a free port), inheritable, for uvicorn's
    `serve(sockets=[...])`."""
    # proto must say TCP: asyncio sets TCP_NODELAY only on sockets that do, and without it
    # every keep-alive response waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    # SO_REUSEADDR lets a restart bind the port its predecessor had while that one's connections
    # sit in TIME_WAIT, and Linux allows it only when the old sockets had the option too. With
    # port 0 it is set only after the bind: set before, Linux may hand two sockets, both bound and
    # not yet listening, the same port (the second server's listen() then fails with EADDRINUSE).
    if port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(
            exc.errno,
            f"cannot bind {host}:{port} ({exc.strerror}); pass --port 0 to take any free "
            "port (the server reports the one it got)",
        ) from None
    if not port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.set_inheritable(True)
    return sock


def bound_port(sock: socket.socket) -> int:
    return sock.getsockname()[1]


def report_port(sock_or_port: socket.socket | int, port_file: Path | None) -> int:
    """Write the bound port to `port_file` (whole or not at all: written aside, then renamed)."""
    port = sock_or_port if isinstance(sock_or_port, int) else bound_port(sock_or_port)
    if port_file is not None:
        partial = port_file.with_name(port_file.name + ".partial")
        partial.write_text(f"{port}\n")
        os.replace(partial, port_file)
    return port


def read_port(process: subprocess.Popen, port_file: Path, name: str, timeout_s: float, *, see: str = "") -> int:
    """The port `process` reported in `port_file`; `ServerStartError` if it exits or `timeout_s`
    passes first (`see` points at its log)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if port_file.is_file():
            text = port_file.read_text().strip()
            if not text.isdigit():
                raise ServerStartError(f"{name} wrote {text!r} to {port_file}; expected the port number it bound")
            return int(text)
        if process.poll() is not None:
            raise ServerStartError(f"{name} exited with {process.returncode} before reporting its port{see}")
        time.sleep(0.05)
    raise ServerStartError(f"{name} reported no port in {port_file} within {timeout_s:.0f}s{see}")
