"""The HTTP env server on 127.0.0.1 with ALFWorld: the episode API, leases, capacity, bad input."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from roost.envs.client import EnvClient
from roost.envs.episodes import ManagerConfig
from roost.envs.errors import (
    BadRequestError,
    CapacityError,
    EpisodeFinishedError,
    EpisodeNotFoundError,
    InvalidActionError,
    UnknownTaskError,
)
from roost.envs.protocol import TextAction, ToolCall
from roost.envs.serve import ServerConfig, serving
from roost.tests.prometheus_samples import sample


def _config(data: Path, **manager) -> ServerConfig:
    return ServerConfig("alfworld", {"data_dir": str(data)}, port=0, manager=ManagerConfig(**{"workers": 1, **manager}))


@pytest.fixture
async def server(alfworld_data: Path):
    async with serving(_config(alfworld_data, max_episodes=3)) as url:
        yield url


async def test_an_expert_episode_end_to_end(server: str):
    async with EnvClient(server) as client:
        info = await client.info()
        assert info.name == "alfworld" and info.splits == ("train", "valid_seen", "valid_unseen")
        tasks = await client.tasks("valid_unseen")
        assert len(tasks) == 3 and all(t.id.startswith("valid_unseen/") for t in tasks)
        episode, reset = await client.create(task_id=tasks[0].id, options={"expert_plan": True})
        assert reset.task_id == tasks[0].id and reset.tools[0]["function"]["name"] == "act"
        assert (await client.status(episode)).state == "running"
        plan = reset.info["expert_plan"]
        while True:
            step = await client.step(episode, ToolCall("act", f'{{"command": "{plan[0]}"}}', id="call_1"))
            if step.done:
                break
            plan = step.info["expert_plan"]
        assert step.reward == 1.0 and step.terminated and not step.truncated
        status = await client.status(episode)
        assert (status.state, status.total_reward, status.lease_expires_at) == ("terminated", 1.0, None)
        with pytest.raises(EpisodeFinishedError):
            await client.step(episode, TextAction("look"))
        assert (await client.delete(episode)).state == "terminated"
        assert (await client.health()).live_episodes == 0


async def test_bad_input_gets_a_clear_4xx_and_the_server_keeps_serving(server: str):
    async with EnvClient(server) as client, httpx.AsyncClient(base_url=server) as raw:
        with pytest.raises(UnknownTaskError, match="no task 'train/nope'"):
            await client.create(task_id="train/nope")
        with pytest.raises(BadRequestError, match="unknown split"):
            await client.tasks("test")
        episode, _ = await client.create(seed=0)
        with pytest.raises(InvalidActionError, match="not an admissible command") as caught:
            await client.step(episode, TextAction("dance"))
        assert "422 from POST" in caught.value.__notes__[0]
        with pytest.raises(InvalidActionError, match="not valid JSON"):
            await client.step(episode, ToolCall("act", "{'command': 'look'}"))
        with pytest.raises(EpisodeNotFoundError):
            await client.step("no-such-episode", TextAction("look"))

        too_big = await raw.post(
            "/episodes", content=b"{" + b" " * (2 << 20) + b"}", headers={"content-type": "application/json"}
        )
        assert too_big.status_code == 413 and too_big.json()["error"]["type"] == "bad_request"
        unknown_field = await raw.post("/episodes", json={"task": "x"})
        assert unknown_field.status_code == 422 and "Extra inputs" in unknown_field.json()["error"]["message"]
        not_json = await raw.post(
            f"/episodes/{episode}/step", content=b"look", headers={"content-type": "application/json"}
        )
        assert not_json.status_code == 422
        bad_action = await raw.post(f"/episodes/{episode}/step", json={"action": {"type": "shout", "text": "hi"}})
        assert bad_action.status_code == 422

        step = await client.step(episode, TextAction("look"))
        assert not step.done and (await client.status(episode)).steps == 1
        metrics = (await raw.get("/metrics")).text
        assert (
            sample(metrics, "roost_env_invalid_actions_total") == 2 and sample(metrics, "roost_env_live_episodes") == 1
        )


async def test_past_max_episodes_the_server_answers_429_with_retry_after(server: str):
    async with EnvClient(server) as client, httpx.AsyncClient(base_url=server) as raw:
        episodes = [(await client.create(seed=i))[0] for i in range(3)]
        full = await raw.post("/episodes", json={"seed": 9})
        assert full.status_code == 429 and full.headers["Retry-After"] == "1"
        assert full.json()["error"]["type"] == "capacity"
        with pytest.raises(CapacityError) as caught:
            await client.create(seed=9)
        assert caught.value.retry_after == 1.0
        await client.delete(episodes[0])
        episode, _ = await client.create(seed=9)
        assert (await client.status(episode)).state == "running"


async def test_idle_episodes_are_reaped_and_free_their_slot(alfworld_data: Path):
    async with serving(_config(alfworld_data, max_episodes=1, lease_s=0.4)) as url, EnvClient(url) as client:
        idle, _ = await client.create(seed=0)
        for _ in range(50):
            if (await client.status(idle)).state == "reaped":
                break
            await asyncio.sleep(0.1)
        assert (await client.status(idle)).state == "reaped"
        with pytest.raises(EpisodeNotFoundError, match="reaped after"):
            await client.step(idle, TextAction("look"))
        fresh, _ = await client.create(seed=1)
        assert (await client.status(fresh)).state == "running"
