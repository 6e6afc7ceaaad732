"""WebShop behind the real env server on 127.0.0.1, driven by the env client."""

from __future__ import annotations

import pytest

from roost.envs.client import EnvClient
from roost.envs.episodes import ManagerConfig
from roost.envs.errors import EpisodeFinishedError, InvalidActionError
from roost.envs.protocol import TextAction, ToolCall
from roost.envs.serve import ServerConfig, serving


@pytest.fixture
async def client():
    async with serving(ServerConfig("webshop", {"max_steps": 10}, port=0, manager=ManagerConfig(workers=1))) as url:
        async with EnvClient(url) as c:
            yield c


async def test_an_expert_episode_over_http_scores_and_ends(client: EnvClient):
    info = await client.info()
    assert info.name == "webshop" and [t["function"]["name"] for t in info.tools] == ["search", "click"]
    assert len(await client.tasks("test")) == 100
    episode, reset = await client.create(task_id="0", options={"expert_plan": True})
    assert reset.observation.text.startswith("WebShop [SEP] Instruction: [SEP] ")
    plan = reset.info["expert_plan"]
    with pytest.raises(InvalidActionError, match="nothing called 'Buy Now'"):
        await client.step(episode, TextAction("click[Buy Now]"))
    while True:
        step = await client.step(episode, ToolCall(*_as_tool(plan[0])))
        if step.done:
            break
        plan = step.info["expert_plan"]
    assert step.reward == 1.0 and step.info["success"] is True
    status = await client.status(episode)
    assert (status.state, status.total_reward) == ("terminated", 1.0)
    with pytest.raises(EpisodeFinishedError):
        await client.step(episode, TextAction("click[back to search]"))


def _as_tool(action: str) -> tuple[str, dict]:
    kind, _, rest = action.partition("[")
    return kind, {"query" if kind == "search" else "target": rest[:-1]}
