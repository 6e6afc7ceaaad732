"""The Hermes image: built from envs/hermes/Dockerfile, healthy, hermes-agent running inside it.

Runs where a Docker engine answers; required (not skipped) when ROOST_REQUIRE_DOCKER=1, as in CI.
"""

from __future__ import annotations

import asyncio

import pytest

from roost.envs.client import EnvClient
from roost.envs.protocol import ToolCall
from roost.envs.registry import resolve

pytestmark = pytest.mark.docker


@pytest.mark.timeout(900)
async def test_the_image_hosts_hermes_agent_with_its_own_dependencies(docker_engine):
    from roost.envs.containers import ContainerConfig, EnvContainer, ensure_image

    spec = resolve("hermes")
    image = ensure_image(docker_engine, spec)
    assert docker_engine.api.inspect_image(image)["Config"]["Healthcheck"]["Test"][0] == "CMD"
    args = ["--workers", "1", "--env-arg", 'hermes_config={"agent": {"api_max_retries": 1}}']
    container = EnvContainer(docker_engine, image, ContainerConfig(spec, server_args=args))
    url = await asyncio.to_thread(container.start)
    try:
        async with EnvClient(url) as client:
            info = await client.info()
            assert info.version.endswith("hermes-agent-0.19.0") and info.tools[0]["function"]["name"] == "run_agent"
            assert {t.id for t in await client.tasks("test")} == {"sort-unique", "fix-stats", "word-count"}
            episode, reset = await client.create(task_id="hello-file")
            assert reset.info["backend"] == "local" and "hello world" in reset.observation.text
            # hermes-agent starts inside the container; nothing answers on its own loopback, so the
            # episode ends unscored as the model's failure (the agent, its deps and sandbox all ran).
            args = {"base_url": "http://127.0.0.1:9/v1", "api_key": "k", "model": "m", "wait_s": 20}
            for _ in range(10):
                step = await client.step(episode, ToolCall("run_agent", args))
                args = {"wait_s": 20}
                if step.done:
                    break
            assert step.truncated and step.info["status"] == "model_unavailable", step.info
    finally:
        await asyncio.to_thread(container.stop)
