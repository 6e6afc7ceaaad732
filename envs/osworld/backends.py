"""Starting desktops: `local` (on this host's Xvfb) or `docker` (one container per desktop).

    pool = DesktopPool(DesktopConfig(backend="local", width=1280, height=720), max_desktops=4)
    desktop = await pool.start()
    async with DesktopClient(desktop.url) as client:
        png = await client.screenshot()
    await desktop.close()

A desktop is an X session with its control server (`desktop/server.py`); `Desktop.url` is that
server's base URL; `host`, `server_port` and `chromium_port` are where OSWorld-style clients
(its `PythonController`, the Chrome DevTools getters) reach it. Inside every desktop the user's
home is `/home/user`, as in OSWorld's VM: the image's user in `docker`; in `local`, a folder of
its own that bubblewrap binds there (where bwrap is missing, the folder itself is $HOME).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from roost.envs.osworld.desktop_client import DesktopClient, DesktopError

DESKTOP_HOME = "/home/user"
SERVER_PORT = 5000
CHROMIUM_PORT = 9222
"""OSWorld's ports inside its VM: the control server's and Chromium's DevTools."""


@dataclass(frozen=True)
class DesktopConfig:
    backend: Literal["local", "docker"] = "local"
    width: int = 1280
    height: int = 720
    image: str | None = None
    """docker: the image to run; default: built (once, tagged by content) from envs/osworld/Dockerfile."""
    base_image: str | None = None
    """docker: BASE_IMAGE of that build; default $ROOST_BASE_IMAGE, else the Dockerfile's own."""
    start_timeout_s: float = 60.0
    network: bool = False
    """docker: give the container a route out (default: an internal network, no route out)."""
    python: str | None = None
    """local: the desktop's python (imports pyatspi and pyautogui); default: a venv over the
    system python3 with pyautogui, made once under `cache_dir`."""
    cache_dir: Path | None = None
    """local: where that venv lives; default ~/.cache/roost."""
    isolate_home: bool | None = None
    """local: bind the desktop's own home folder at /home/user with bubblewrap (None: where bwrap runs)."""
    labels: dict[str, str] = field(default_factory=dict)
    """docker: extra container labels."""


class Desktop(Protocol):
    url: str
    host: str
    server_port: int
    chromium_port: int

    async def close(self) -> None: ...

    async def alive(self) -> bool: ...


async def start_desktop(config: DesktopConfig) -> Desktop:
    """Starts one desktop and waits until its control server answers; unbounded (see DesktopPool)."""
    if config.backend == "local":
        from roost.envs.osworld.local_desktop import start_local

        return await start_local(config)
    if config.backend == "docker":
        from roost.envs.osworld.docker_desktop import start_docker

        return await start_docker(config)
    raise ValueError(f"unknown desktop backend {config.backend!r}; expected 'local' or 'docker'")


class DesktopPool:
    """Starts desktops with at most `max_desktops` running at once: a start past the bound
    waits for a close, up to `config.start_timeout_s`, then raises DesktopError."""

    def __init__(self, config: DesktopConfig, max_desktops: int = 4) -> None:
        if max_desktops < 1:
            raise ValueError(f"max_desktops must be at least 1, got {max_desktops}")
        self.config = config
        self.max_desktops = max_desktops
        self._slots = asyncio.Semaphore(max_desktops)
        self._versions: dict[str, str] | None = None

    async def start(self, wait_s: float | None = None) -> Desktop:
        """A new desktop; past the bound, waits `wait_s` (default: the start timeout) for a close."""
        wait_s = self.config.start_timeout_s if wait_s is None else wait_s
        try:
            await asyncio.wait_for(self._slots.acquire(), wait_s)
        except TimeoutError as exc:
            raise DesktopError(
                f"{self.max_desktops} desktops are running (the pool's bound) and none closed "
                f"within {wait_s:g}s; close desktops or raise max_desktops"
            ) from exc
        try:
            desktop = await start_desktop(await self._resolved())
        except BaseException:
            self._slots.release()
            raise
        return _Pooled(desktop, self._slots.release)

    async def versions(self, client: DesktopClient) -> dict[str, str]:
        """The applications' versions, as the first desktop asked (`client` is one of this pool's)
        reported them: every desktop of a pool runs the same image, or the same host."""
        if self._versions is None:
            self._versions = await client.versions()
        return self._versions

    async def _resolved(self) -> DesktopConfig:
        """The config with the local backend's host probes (its python, bwrap) done once per pool."""
        if self.config.backend == "local" and (self.config.python is None or self.config.isolate_home is None):
            from roost.envs.osworld.local_desktop import resolve_host

            self.config = await resolve_host(self.config)
        return self.config


class _Pooled:
    """A desktop whose close frees its pool slot (once)."""

    def __init__(self, desktop: Desktop, release) -> None:
        self._desktop = desktop
        self._release = release
        self.url, self.host = desktop.url, desktop.host
        self.server_port, self.chromium_port = desktop.server_port, desktop.chromium_port

    async def close(self) -> None:
        release, self._release = self._release, None
        try:
            await self._desktop.close()
        finally:
            if release is not None:
                release()

    async def alive(self) -> bool:
        return await self._desktop.alive()

    def __getattr__(self, name: str):
        return getattr(self._desktop, name)  # backend-specific fields (a container's id, ...)


async def serving_or_closed(desktop: Desktop, timeout_s: float, gone: Callable[[], str | None]) -> Desktop:
    """`desktop` once GET /health answers 200. At the timeout, or when `gone()` says its process
    or container ended (its text is the reason), the desktop is closed and DesktopError raised."""
    try:
        await _wait_until_serving(desktop.url, timeout_s, gone)
    except BaseException:
        await desktop.close()
        raise
    return desktop


async def _wait_until_serving(url: str, timeout_s: float, gone: Callable[[], str | None]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    async with DesktopClient(url, timeout_s=5.0) as client:
        while loop.time() < deadline:
            if await client.health():
                return
            reason = gone()
            if reason:
                raise DesktopError(f"the desktop at {url} ended while starting: {reason}")
            await asyncio.sleep(0.1)
    raise DesktopError(f"the desktop's control server at {url} did not answer within {timeout_s:.0f}s")
