"""The WebShop image: built from envs/webshop/Dockerfile, healthy, serving the JSON API and the pages.

Runs where a Docker engine answers; required (not skipped) when ROOST_REQUIRE_DOCKER=1, as in CI.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from roost.envs.client import EnvClient
from roost.envs.protocol import TextAction
from roost.envs.registry import resolve

pytestmark = pytest.mark.docker


@pytest.mark.timeout(900)
async def test_the_image_serves_episodes_and_pages(docker_engine):
    from roost.envs.containers import ContainerConfig, EnvContainer, ensure_image

    spec = resolve("webshop")
    image = ensure_image(docker_engine, spec)
    inspected = docker_engine.api.inspect_image(image)
    assert inspected["Config"]["Healthcheck"]["Test"][0] == "CMD"
    container = EnvContainer(docker_engine, image, ContainerConfig(spec, server_args=["--workers", "1"]))
    url = container.start()
    try:
        async with EnvClient(url) as client:
            assert (await client.info()).name == "webshop"
            episode, reset = await client.create(task_id="0", options={"expert_plan": True})
            info = reset.info
            while True:
                step = await client.step(episode, TextAction(info["expert_plan"][0]))
                if step.done:
                    break
                info = step.info
            assert step.reward == 1.0
        # the image's own command (the web server) serves the pages as well
        web = docker_engine.containers.run(
            image, detach=True, ports={"8000/tcp": ("127.0.0.1", None)}, labels={"roost.env": "webshop"}
        )
        try:
            page = await _first_page(docker_engine, web)
            assert 'id="search_input"' in page
        finally:
            web.remove(force=True)
    finally:
        container.stop()


async def _first_page(docker_engine, container, timeout_s: float = 120.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        container.reload()
        ports = (container.attrs["NetworkSettings"]["Ports"] or {}).get("8000/tcp")
        if container.status == "exited":
            raise AssertionError(container.logs(tail=30).decode(errors="replace"))
        if ports:
            try:
                async with httpx.AsyncClient(follow_redirects=True) as http:
                    r = await http.get(f"http://127.0.0.1:{ports[0]['HostPort']}/web/new", params={"task_id": "0"})
                if r.status_code == 200:
                    return r.text
            except httpx.HTTPError:
                pass
        await asyncio.sleep(0.5)
    raise AssertionError(f"the web server did not answer within {timeout_s:.0f}s")
