"""The docker desktop backend: the image built from envs/osworld/Dockerfile (once per content),
one container per desktop, the same checks as the local backend, plus what a container adds:
its `user`, no route out, Chromium's DevTools on the container's port 9222.

Runs where a Docker engine answers; required (not skipped) when ROOST_REQUIRE_DOCKER=1, as in CI.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from roost.envs.osworld.backends import DesktopConfig, start_desktop
from roost.envs.osworld.desktop_client import DesktopClient
from roost.tests.envs.osworld_checks import (
    check_chromium_devtools,
    check_files,
    check_screenshot,
    check_typing_into_mousepad,
)

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]
WIDTH, HEIGHT = 1024, 640


@pytest.fixture(scope="module")
def image():
    try:
        from roost.envs.containers import ContainerError, docker_client

        client = docker_client()
    except (ImportError, ContainerError) as exc:
        if os.environ.get("ROOST_REQUIRE_DOCKER") == "1":
            pytest.fail(f"ROOST_REQUIRE_DOCKER=1 but no Docker engine: {exc}")
        pytest.skip(f"no Docker engine: {exc}")
    from roost.envs.osworld.docker_desktop import desktop_image

    tag = desktop_image(client, DesktopConfig(backend="docker"))
    assert client.api.inspect_image(tag)["Config"]["Healthcheck"]["Test"][0] == "CMD"
    return tag


@pytest.fixture(scope="module")
def desktop(image):
    desktop = asyncio.run(start_desktop(DesktopConfig(backend="docker", image=image, width=WIDTH, height=HEIGHT)))
    yield desktop
    asyncio.run(desktop.close())


async def test_the_container_desktop_answers_like_the_local_one(desktop):
    async with DesktopClient(desktop.url) as client:
        await check_screenshot(client, WIDTH, HEIGHT)
        await check_typing_into_mousepad(client, WIDTH, HEIGHT)
        await check_files(client)


async def test_it_runs_as_user_with_no_route_out(desktop):
    async with DesktopClient(desktop.url) as client:
        who = await client.execute("id -un; echo $HOME", shell=True)
        assert who.output.split() == ["user", "/home/user"]
        probe = await client.run_python(
            "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 80), timeout=3)\n    print('reached')\n"
            "except OSError as exc:\n    print('blocked', exc)\n", timeout_s=20)
        assert probe.output.startswith("blocked"), probe


async def test_chromium_devtools_answer_on_the_desktop_port(desktop):
    async with DesktopClient(desktop.url) as client:
        await check_chromium_devtools(client, desktop.host, desktop.chromium_port)
