"""The ALFWorld image: built from envs/alfworld/Dockerfile, healthy, playing episodes from a container.

Runs where a Docker engine answers; required (not skipped) when ROOST_REQUIRE_DOCKER=1, as in CI.
The build takes BASE_IMAGE from $ROOST_BASE_IMAGE (CI: an offline debootstrap image).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from roost.envs.client import EnvClient
from roost.envs.protocol import TextAction
from roost.envs.registry import resolve
from roost.serving.process import start_reporting

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def alfworld_image(docker_engine) -> str:
    from roost.envs.containers import ensure_image

    return ensure_image(docker_engine, resolve("alfworld"))


async def _play_expert(url: str) -> float:
    async with EnvClient(url) as client:
        assert (await client.info()).name == "alfworld"
        task = (await client.tasks("valid_unseen"))[0]
        episode, reset = await client.create(task_id=task.id, options={"expert_plan": True})
        info = reset.info
        while True:
            step = await client.step(episode, TextAction(info["expert_plan"][0]))
            if step.done:
                return step.reward
            info = step.info


@pytest.mark.timeout(1200)
async def test_an_episode_against_the_server_in_the_container(docker_engine, alfworld_image: str, alfworld_data: Path):
    from roost.envs.containers import ContainerConfig, EnvContainer

    healthcheck = docker_engine.api.inspect_image(alfworld_image)["Config"]["Healthcheck"]
    assert "/health" in " ".join(healthcheck["Test"])
    config = ContainerConfig(resolve("alfworld"), data_dir=alfworld_data, server_args=["--workers", "1"])
    container = EnvContainer(docker_engine, alfworld_image, config)
    container.start()
    try:
        assert await _play_expert(container.url) == 1.0
    finally:
        container.stop()


@pytest.mark.timeout(600)
async def test_roost_serve_docker_serves_and_cleans_up(
    docker_engine, alfworld_image: str, alfworld_data: Path, tmp_path: Path
):
    port_file = tmp_path / "port"
    command = [
        sys.executable,
        "-m",
        "roost.cli.main",
        "serve",
        "alfworld",
        "--docker",
        "--port",
        "0",
        "--port-file",
        str(port_file),
        "--workers",
        "1",
        "--data-dir",
        str(alfworld_data),
    ]
    server, port = start_reporting(command, port_file, "roost serve --docker", 300)
    url = f"http://127.0.0.1:{port}"
    try:
        assert await _play_expert(url) == 1.0
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)
    assert not docker_engine.containers.list(all=True, filters={"label": "roost.env=alfworld"})
