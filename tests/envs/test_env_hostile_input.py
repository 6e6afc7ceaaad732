"""Whatever an agent sends is an invalid action (422), never an env fault: tool-call arguments
nested ~1,000 deep, integers of thousands of digits, NaN and 1e400, a text past its limit. The
episode stays running and unchanged, and the server keeps serving."""

from __future__ import annotations

import re

import httpx
import pytest

from roost.envs.client import EnvClient
from roost.envs.episodes import EpisodeManager, ManagerConfig
from roost.envs.errors import InvalidActionError
from roost.envs.protocol import TextAction, ToolCall
from roost.envs.serve import ServerConfig, serving
from roost.envs.worker import WorkerConfig
from roost.tests.prometheus_samples import sample

TOY = "roost.tests.envs.toy_envs:make_factory"
JSON = {"content-type": "application/json"}
DEEP = "[" * 990 + "]" * 990

# (the arguments as the model wrote them, what the refusal says)
HOSTILE = [
    ('{"command": %s}' % DEEP, "nest 991 deep; at most 64 levels are accepted"),
    ('{"command": %s}' % ("9" * 4301), "an integer of 4,301 digits; at most 4,300 are accepted"),
    ('{"command": NaN}', "hold NaN, which JSON does not allow"),
    ('{"command": 1e400}', "hold 1e400, a number past the float range"),
]


@pytest.fixture
async def server():
    async with serving(ServerConfig(TOY, port=0, manager=ManagerConfig(workers=1, max_episodes=2))) as url:
        yield url


@pytest.mark.parametrize("arguments,refusal", HOSTILE, ids=["deep", "4301-digits", "nan", "1e400"])
async def test_hostile_tool_call_arguments_are_invalid_actions(server: str, arguments: str, refusal: str):
    async with EnvClient(server) as client, httpx.AsyncClient(base_url=server) as raw:
        episode, _ = await client.create()
        # as JSON text, the way OpenAI returns a model's arguments
        with pytest.raises(InvalidActionError, match=re.escape(refusal)):
            await client.step(episode, ToolCall("act", arguments))
        # as an object, the way a client that parsed them sends them
        body = '{"action": {"type": "tool_call", "name": "act", "arguments": %s}}' % arguments
        refused = await raw.post(f"/episodes/{episode}/step", content=body, headers=JSON)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["type"] == "invalid_action" and refusal in refused.json()["error"]["message"]
        status = await client.status(episode)
        assert (status.state, status.steps, status.error) == ("running", 0, None)
        assert (await client.step(episode, TextAction("inc"))).observation.text == "n=1"
        metrics = (await raw.get("/metrics")).text
    assert sample(metrics, "roost_env_invalid_actions_total") == 2
    assert sample(metrics, "roost_env_worker_restarts_total") == 0
    assert sample(metrics, "roost_env_errors_total", type="env_error") is None


async def test_what_a_model_wrote_past_its_limits_is_invalid_but_a_malformed_body_is_the_client_s(server: str):
    async with EnvClient(server) as client, httpx.AsyncClient(base_url=server) as raw:
        episode, _ = await client.create()
        with pytest.raises(InvalidActionError, match="at most 65536 characters"):
            await client.step(episode, TextAction("inc " * 20_000))  # refused by the client, as the server would
        with pytest.raises(InvalidActionError, match="at most 256 characters"):
            await client.step(episode, ToolCall("act" * 100, "{}"))
        too_long = await raw.post(
            f"/episodes/{episode}/step", json={"action": {"type": "text", "text": "inc " * 20_000}}
        )
        assert too_long.status_code == 422 and too_long.json()["error"]["type"] == "invalid_action"
        assert "at most 65536 characters" in too_long.json()["error"]["message"]
        not_an_action = await raw.post(f"/episodes/{episode}/step", json={"action": {"type": "shout", "text": "hi"}})
        assert not_an_action.status_code == 422 and not_an_action.json()["error"]["type"] == "bad_request"
        not_json = await raw.post(f"/episodes/{episode}/step", content=b"\xff{", headers=JSON)
        assert not_json.status_code == 422 and not_json.json()["error"]["type"] == "bad_request"
        unknown = await raw.post(
            "/episodes/nope/step", content='{"action": {"type": "text", "text": %s}}' % DEEP, headers=JSON
        )
        assert unknown.status_code == 404  # no such episode comes before what the action holds
        assert (await client.step(episode, TextAction("inc"))).observation.text == "n=1"


async def test_in_process_object_arguments_are_checked_before_a_worker_sees_them():
    deep: list = []
    for _ in range(2000):  # deeper than pickle or json could follow
        deep = [deep]
    async with EpisodeManager(WorkerConfig(TOY, {}), ManagerConfig(workers=1)) as manager:
        episode, _ = await manager.create()
        worker = manager.workers[0]
        for arguments, refusal in [
            ({"command": deep}, "nest more than 64 levels deep"),
            ({"command": 10**5000}, "an integer of more than 4,300 digits"),
            ({"command": float("inf")}, "hold inf; only finite numbers"),
            ({"command": {1, 2}}, "hold a set, which is not JSON data"),
        ]:
            with pytest.raises(InvalidActionError, match=re.escape(refusal)):
                await manager.step(episode, ToolCall("act", arguments))
        assert (await manager.step(episode, ToolCall("act", {"command": "inc"}))).observation.text == "n=1"
        assert manager.workers[0] is worker and worker.alive and manager.get(episode).state == "running"
