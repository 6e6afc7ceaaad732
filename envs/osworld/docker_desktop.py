"""The `docker` desktop backend: one container per desktop, from envs/osworld/Dockerfile.

The image is built once per content (envs/containers.py tags it by a hash of its context) and
reused. Each container runs the control server as the image's `user` (home /home/user), on an
internal Docker network (no route out), reached at its own IP on OSWorld's ports (5000 for the
server, 9222 for Chromium's DevTools). Containers carry the label `roost.osworld.desktop` and
their owner's pid and start time; a start removes those whose owner is gone.
"""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass
from typing import Any

from roost.envs.osworld.backends import (
    CHROMIUM_PORT,
    DESKTOP_HOME,
    SERVER_PORT,
    DesktopConfig,
    serving_or_closed,
)
from roost.envs.osworld.desktop_client import DesktopClient, DesktopError
from roost.sandboxes.stale import process_start_time

LABEL = "roost.osworld.desktop"
OWNER_LABEL = "roost.osworld.owner"
NETWORK = "roost-osworld-desktops"


@dataclass
class DockerDesktop:
    url: str
    host: str
    server_port: int
    chromium_port: int
    container: Any

    async def close(self) -> None:
        await asyncio.to_thread(_remove, self.container)

    async def alive(self) -> bool:
        try:
            await asyncio.to_thread(self.container.reload)
        except Exception:  # noqa: BLE001 - the SDK's NotFound and connection errors alike
            return False
        if self.container.status != "running":
            return False
        async with DesktopClient(self.url, timeout_s=5.0) as client:
            return await client.health()

    def logs(self, tail: int = 50) -> str:
        try:
            return self.container.logs(tail=tail).decode(errors="replace")
        except Exception:  # noqa: BLE001 - gone already
            return ""


def desktop_image(client: Any, config: DesktopConfig, log=print) -> str:
    """The desktop image's tag: `config.image`, or built from envs/osworld/Dockerfile (once per content)."""
    if config.image:
        return config.image
    from roost.envs.containers import ensure_image
    from roost.envs.registry import EnvSpec

    spec = EnvSpec("osworld", "roost.envs.osworld.env:make_factory")
    return ensure_image(client, spec, config.base_image, log=log)


async def start_docker(config: DesktopConfig) -> DockerDesktop:
    from roost.envs.containers import ContainerError, docker_client

    try:
        client = await asyncio.to_thread(docker_client)
        image = await asyncio.to_thread(desktop_image, client, config)
    except ContainerError as exc:
        raise DesktopError(f"the docker desktop backend cannot start a desktop: {exc}") from exc
    await asyncio.to_thread(sweep_stale, client)
    desktop = await asyncio.to_thread(_run, client, image, config)
    return await serving_or_closed(desktop, config.start_timeout_s, lambda: _exited(desktop))


def _run(client: Any, image: str, config: DesktopConfig) -> DockerDesktop:
    network = _network(client, internal=not config.network)
    command = [
        "python3",
        "-m",
        "roost.envs.osworld.desktop.server",
        "--host",
        "0.0.0.0",
        "--port",
        str(SERVER_PORT),
        "--width",
        str(config.width),
        "--height",
        str(config.height),
        "--home",
        DESKTOP_HOME,
        "--devtools-port",
        str(CHROMIUM_PORT),
    ]
    labels = {LABEL: "1", OWNER_LABEL: _owner(), **config.labels}
    # Chromium wants more shared memory than Docker's 64 MB default.
    container = client.containers.run(
        image, command, detach=True, labels=labels, network=network.name, shm_size="512m", init=True
    )
    container.reload()
    address = container.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
    return DockerDesktop(f"http://{address}:{SERVER_PORT}", address, SERVER_PORT, CHROMIUM_PORT, container)


def _network(client: Any, internal: bool) -> Any:
    import docker

    name = NETWORK if internal else f"{NETWORK}-open"
    found = client.networks.list(names=[name])
    if found:
        return found[0]
    try:
        return client.networks.create(name, driver="bridge", internal=internal, labels={LABEL: "1"})
    except docker.errors.APIError:  # made by a desktop starting at the same time
        return client.networks.list(names=[name])[0]


def _exited(desktop: DockerDesktop) -> str | None:
    try:
        desktop.container.reload()
    except Exception as exc:  # noqa: BLE001 - removed under us
        return f"the container is gone ({exc})"
    if desktop.container.status in ("exited", "dead"):
        return f"the container exited; its log ends with:\n{desktop.logs()}"
    return None


def _remove(container: Any) -> None:
    import docker

    try:
        container.remove(force=True)
    except docker.errors.NotFound:
        pass


def _owner() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{process_start_time(pid)}"


def sweep_stale(client: Any) -> int:
    """Removes desktop containers whose owner process (on this host) is gone; how many."""
    removed = 0
    for container in client.containers.list(all=True, filters={"label": LABEL}):
        host, _, rest = container.labels.get(OWNER_LABEL, "").partition(":")
        pid, _, start = rest.partition(":")
        if host != socket.gethostname() or not pid.isdigit():
            continue
        if process_start_time(int(pid)) != (start or None):
            _remove(container)
            removed += 1
    return removed
