"""The docker desktop backend: the image built from envs/osworld/Dockerfile (once per content),
one container per desktop, the same checks as the local backend, plus what a container adds:
its `user`, no route out, Chromium's DevTools on the container's port 9222. Then whole episodes:
the env server here with `backend=docker`, and the env server itself in that image
(`roost serve osworld --docker`), its desktops local to the container, each in bubblewrap.

Runs where a Docker engine answers; required (not skipped) when ROOST_REQUIRE_DOCKER=1, as in CI.
"""

from __future__ import annotations

import asyncio

import pytest

from roost.envs.client import EnvClient
from roost.envs.episodes import ManagerConfig
from roost.envs.osworld.backends import DesktopConfig, start_desktop
from roost.envs.osworld.desktop_client import DesktopClient
from roost.envs.protocol import TextAction
from roost.envs.registry import resolve
from roost.envs.serve import ServerConfig, serving
from roost.tests.envs.osworld_checks import (
    NOTES,
    check_chromium_devtools,
    check_files,
    check_notes_episode,
    check_screenshot,
    check_typing_into_mousepad,
    check_versions,
    write_tasks,
)

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]
WIDTH, HEIGHT = 1024, 640


EPISODE = {
    "observation_type": "screenshot_a11y_tree",
    "width": WIDTH,
    "height": HEIGHT,
    "step_timeout_s": 10,
    "max_steps": 16,
    "settle_s": 0.2,
    "wait_s": 0.5,
}


@pytest.fixture(scope="module")
def image(docker_engine):
    from roost.envs.osworld.docker_desktop import desktop_image

    tag = desktop_image(docker_engine, DesktopConfig(backend="docker"))
    assert docker_engine.api.inspect_image(tag)["Config"]["Healthcheck"]["Test"][0] == "CMD"
    return tag


@pytest.fixture(scope="module")
def tasks_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("osworld-docker")
    root.chmod(0o755)  # pytest makes it 0700; the server in the container reads it as `user`
    return write_tasks(root, [("os", NOTES)], {"os": [NOTES["id"]]})


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
        await check_versions(client)


async def test_it_runs_as_user_with_no_route_out(desktop):
    async with DesktopClient(desktop.url) as client:
        who = await client.execute("id -un; echo $HOME", shell=True)
        assert who.output.split() == ["user", "/home/user"]
        probe = await client.run_python(
            "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 80), timeout=3)\n    print('reached')\n"
            "except OSError as exc:\n    print('blocked', exc)\n",
            timeout_s=20,
        )
        assert probe.output.startswith("blocked"), probe


async def test_chromium_devtools_answer_on_the_desktop_port(desktop):
    async with DesktopClient(desktop.url) as client:
        await check_chromium_devtools(client, desktop.host, desktop.chromium_port)


async def test_an_episode_on_a_docker_desktop(image, tasks_dir):
    kwargs = {"tasks": str(tasks_dir), "backend": "docker", **EPISODE}
    config = ServerConfig("osworld", kwargs, port=0, manager=ManagerConfig(workers=1, max_episodes=1))
    async with serving(config) as url, EnvClient(url) as client:
        await check_notes_episode(client, WIDTH, HEIGHT)


async def test_roost_serve_osworld_docker_runs_episodes_in_its_container(docker_engine, image, tasks_dir):
    from roost.envs.containers import ContainerConfig, EnvContainer

    args = ["--workers", "1", "--max-episodes", "2"] + [
        a for k, v in EPISODE.items() for a in ("--env-arg", f"{k}={v}")
    ]
    container = EnvContainer(
        docker_engine, image, ContainerConfig(resolve("osworld"), data_dir=tasks_dir, server_args=args)
    )
    url = await asyncio.to_thread(container.start)
    try:
        async with EnvClient(url) as client:
            assert [t.id for t in await client.tasks("test")] == [NOTES["id"]]
            await check_notes_episode(client, WIDTH, HEIGHT)
            # Two desktops at once, each with its own /home/user (bubblewrap in the container).
            first, _ = await client.create(task_id=NOTES["id"])
            second, _ = await client.create(task_id=NOTES["id"])
            for episode, word in ((first, "desk-one-7f"), (second, "desk-two-3c")):
                await client.step(episode, TextAction(f"open('/home/user/which', 'w').write({word!r})"))
            for episode, word in ((first, "desk-one-7f"), (second, "desk-two-3c")):
                step = await client.step(episode, TextAction("print(open('/home/user/which').read())"))
                assert word in step.observation.text, step.observation.text[-500:]
    finally:
        await asyncio.to_thread(container.stop)
