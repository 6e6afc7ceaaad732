"""What an agent sends cannot dodge its penalty: actions no env can read (arguments nested ~1,000
deep, integers of thousands of digits, NaN) are invalid actions, scored and penalised, never
`infra_error`; so is a model's tool call nested ~1,000 deep, through the real gateway."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from roost.agents.command import CommandAgent
from roost.agents.protocol import AgentOutcome
from roost.agents.runner import RunConfig, run_episode, summarize
from roost.agents.tool_agent import ToolAgent
from roost.envs.client import EnvClient
from roost.envs.episodes import ManagerConfig
from roost.envs.errors import InvalidActionError
from roost.envs.protocol import ToolCall
from roost.envs.serve import ServerConfig, serving
from roost.rollout.engine.launch import EngineProcess
from roost.rollout.gateway.control.client import GatewayClient
from roost.rollout.keys import bearer
from roost.tests.prometheus_samples import sample

DEEP = "[" * 990 + "]" * 990
HOSTILE = ['{"command": %s}' % DEEP, '{"command": %s}' % ("9" * 4301), '{"command": NaN}', {"command": float("inf")}]


class Prankster:
    """Sends each action that used to fail the env's worker, then gives up."""

    name, needs_model, reset_options = "prankster", False, {}

    async def run(self, ctx):
        invalid = 0
        for arguments in HOSTILE:
            try:
                await ctx.step(ToolCall("act", arguments))
            except InvalidActionError:
                invalid += 1
        return AgentOutcome(turns=len(HOSTILE), invalid_actions=invalid, stop_reason="gave_up")


@pytest.fixture
async def env_server(alfworld_data: Path):
    async with serving(
        ServerConfig("alfworld", {"data_dir": str(alfworld_data)}, port=0, manager=ManagerConfig(workers=1))
    ) as url:
        yield url


async def test_actions_no_env_can_read_are_penalised_never_infra_errors(
    env_server: str, scripted_gateway: str, admin_key: str
):
    async with EnvClient(env_server) as client, GatewayClient(scripted_gateway, admin_key=admin_key) as gateway:
        [task, *_] = await client.tasks("train")
        run = RunConfig(run_id="pranks", progress=False, invalid_action_penalty=0.25)
        result = await run_episode(task, client, Prankster(), (await client.info()).tools, run, gateway)
        assert (await client.health()).live_episodes == 0  # the episode ended as usual
    assert (result.status, result.invalid_actions, result.error) == ("ok", 4, None)
    assert summarize([result])["scored"] == 1
    session = httpx.get(f"{scripted_gateway}/sessions/{result.session_id}", headers=bearer(admin_key)).json()
    assert [r["reward"] for r in session["rewards"]] == [-1.0] and session["outcome"]["status"] == "ok"


POSTER = textwrap.dedent("""
    import json, os, sys, urllib.error, urllib.request

    deep = "[" * 990 + "]" * 990
    bodies = ['{"type": "tool_call", "name": "act", "arguments": {"command": %s}}' % deep,
              '{"type": "tool_call", "name": "act", "arguments": {"command": %s}}' % ("9" * 4301),
              '{"type": "text", "text": "%s"}' % ("look " * 20000), '{"type": "text"']
    answers = []
    for body in bodies:
        request = urllib.request.Request(os.environ["ROOST_ENV_STEP_URL"], body.encode(),
                                         {"content-type": "application/json"})
        try:
            answers.append(f"{urllib.request.urlopen(request).status} ok")
        except urllib.error.HTTPError as exc:
            answers.append(f"{exc.code} {json.loads(exc.read())['error']['type']}")
    open(sys.argv[1], "w").write("\\n".join(answers))
""")


async def test_a_command_s_unreadable_actions_are_invalid_actions_too(env_server: str, tmp_path: Path):
    (tmp_path / "poster.py").write_text(POSTER)
    async with EnvClient(env_server) as client:
        [task, *_] = await client.tasks("train")
        agent = CommandAgent(
            command=f"{sys.executable} {tmp_path / 'poster.py'} {tmp_path / 'answers'}", submit_tool=None
        )
        result = await run_episode(task, client, agent, (await client.info()).tools, RunConfig(progress=False))
    answers = (tmp_path / "answers").read_text().splitlines()
    assert answers == ["400 invalid_action"] * 3 + ["400 bad_request"]
    assert (result.status, result.invalid_actions) == ("ok", 3)


# A model's tool call nested 990 deep: as an object the gateway does not take it for a call (the
# agent sends its text, which the env refuses); as a JSON string it reaches the env, which refuses it.
DEEP_CALLS = {
    "object": '<tool_call>\n{"name": "act", "arguments": {"command": %s}}\n</tool_call>' % DEEP,
    "string": '<tool_call>\n{"name": "act", "arguments": "{\\"command\\": %s}"}\n</tool_call>' % DEEP,
}


@pytest.mark.parametrize("form", sorted(DEEP_CALLS))
async def test_a_model_s_tool_call_nested_990_deep_is_an_invalid_action(
    form: str, env_server: str, scripted_engine: EngineProcess, scripted_gateway: str, admin_key: str, tmp_path: Path
):
    scripted_engine_url = scripted_engine.url
    async with httpx.AsyncClient(headers=bearer(scripted_engine.api_key)) as http:
        rules = {"rules": [{"match": None, "reply": DEEP_CALLS[form]}]}
        (await http.post(f"{scripted_engine_url}/roost/scripted_sampler", json=rules)).raise_for_status()
        try:
            async with EnvClient(env_server) as client, GatewayClient(scripted_gateway, admin_key=admin_key) as gateway:
                [task, *_] = await client.tasks("train")
                run = RunConfig(max_turns=1, run_id=f"deep-{form}", progress=False, invalid_action_penalty=0.5)
                result = await run_episode(
                    task, client, ToolAgent(max_tokens=2500), (await client.info()).tools, run, gateway
                )
                metrics = (await http.get(f"{env_server}/metrics")).text
        finally:
            await http.post(
                f"{scripted_engine_url}/roost/scripted_sampler", json={"rules": [{"match": None, "reply": "OK."}]}
            )
    assert (result.status, result.turns, result.invalid_actions) == ("ok", 1, 1), result.error
    assert sample(metrics, "roost_env_invalid_actions_total") == 1
    assert sample(metrics, "roost_env_errors_total", type="env_error") is None
    session = httpx.get(f"{scripted_gateway}/sessions/{result.session_id}", headers=bearer(admin_key)).json()
    assert sorted(r["reward"] for r in session["rewards"]) == [-0.5, 0.0]  # the call that chose it; the episode
