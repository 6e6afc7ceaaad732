"""The SWE env's image: built from envs/swe/Dockerfile, serving episodes graded in the container.

Runs where a Docker engine answers; required (not skipped) when ROOST_REQUIRE_DOCKER=1, as in CI.
"""

from __future__ import annotations

import json

import pytest

from roost.envs.client import EnvClient
from roost.envs.protocol import ToolCall
from roost.envs.registry import resolve
from roost.envs.swe.fixtures import fixture_tasks

pytestmark = pytest.mark.docker

CALC = "roost-fixtures__calc-1"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


@pytest.fixture(scope="module")
def served(docker_engine):
    """The image (built once; its tag is its context's digest, so a rebuild happens only when
    the context changes), serving the offline fixtures with local sandboxes inside."""
    from roost.envs.containers import ContainerConfig, EnvContainer, ensure_image

    spec = resolve("swe")
    image = ensure_image(docker_engine, spec)
    container = EnvContainer(docker_engine, image, ContainerConfig(spec, server_args=["--workers", "1"]))
    url = container.start()
    try:
        yield url
    finally:
        container.stop()


def _bash(command: str) -> ToolCall:
    return ToolCall("bash", {"command": command})


@pytest.mark.timeout(900)
async def test_the_image_grades_the_gold_patch_and_doing_nothing(served, tmp_path):
    async with EnvClient(served) as client:
        assert (await client.info()).name == "swe"
        episode, _ = await client.create(task_id=CALC)
        # The fixtures are generated deterministically: the host's copy has the image's gold patch.
        gold = next(t for t in fixture_tasks(tmp_path / "fixtures") if t.instance_id == CALC).patch
        await client.step(episode, ToolCall("write_file", {"path": "gold.patch", "content": gold}))
        applied = await client.step(episode, _bash("git apply gold.patch && rm gold.patch && git status --short"))
        assert "calc/stats.py" in applied.observation.text, applied.observation.text
        done = await client.step(episode, _bash(SUBMIT))
        assert done.terminated and done.reward == 1.0 and done.info["status"] == "RESOLVED_FULL", json.dumps(done.info)
        idle, _ = await client.create(task_id=CALC)
        nothing = await client.step(idle, _bash(SUBMIT))
        assert nothing.terminated and nothing.reward == 0.0 and nothing.info["status"] == "empty_patch"
