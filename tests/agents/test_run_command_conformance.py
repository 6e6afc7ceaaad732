"""Any command as the harness (`roost run --command`): its environment, rewards, records, limits.

The command here is a small OpenAI-client agent: it reads ROOST_TASK_JSON, asks the model
through OPENAI_BASE_URL (the gateway session) and posts each tool call to ROOST_ENV_STEP_URL.
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap

import httpx
import pytest

from roost.agents.command import command_eval
from roost.agents.evaluate import EvalConfig, play
from roost.agents.harness_check import EngineRecorder, token_exact_problems
from roost.envs.swe.fixtures import make_fixtures
from roost.rollout.keys import bearer

AGENT = textwrap.dedent("""
    import json, os, urllib.request
    import openai

    client = openai.OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"])
    task = json.loads(os.environ["ROOST_TASK_JSON"])
    messages = [{"role": "user", "content": task["observation"]}]
    for _ in range(4):
        message = client.chat.completions.create(model=os.environ.get("ROOST_MODEL", "tiny"), messages=messages,
                                                 tools=task["tools"], max_tokens=200).choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            body = json.dumps({"type": "tool_call", "name": call.function.name,
                               "arguments": call.function.arguments}).encode()
            request = urllib.request.Request(os.environ["ROOST_ENV_STEP_URL"], body, {"content-type": "application/json"})
            step = json.load(urllib.request.urlopen(request))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": step["observation"]})
            if step["terminated"] or step["truncated"]:
                raise SystemExit(0)
""")
ECHO_ENV = (
    "import json, os; print(json.dumps({k: os.environ.get(k) for k in ['ROOST_BASE_URL', 'OPENAI_BASE_URL', "
    "'OPENAI_API_KEY', 'ROOST_SESSION_ID', 'ROOST_ENV_STEP_URL', 'ANTHROPIC_BASE_URL', 'ANTHROPIC_API_KEY']})); "
    "print(json.loads(os.environ['ROOST_TASK_JSON'])['id'])"
)


def call(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def rules(replacement: str) -> dict:
    edit = f"sed -i 's/(len(values) - 1)/{replacement}/' calc/stats.py && echo ROOST-EDIT-DONE"
    return {
        "rules": [
            {"match": None, "reply": "Nothing to do."},
            {"match": r"mean\(\[1, 2, 3\]\)", "reply": call("bash", {"command": edit})},
            {"match": "ROOST-EDIT-DONE", "reply": call("submit", {})},
        ]
    }


@pytest.fixture(scope="module")
def fixtures_dir(tmp_path_factory):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    folder = tmp_path_factory.mktemp("swe") / "fixtures"
    make_fixtures(folder)
    return folder


def script(engine, rules: dict) -> None:
    """Replace the scripted engine's rules (a control route: it takes the engine's key)."""
    httpx.post(f"{engine.url}/roost/scripted_sampler", json=rules, headers=bearer(engine.api_key)).raise_for_status()


@pytest.fixture
def gateway(scripted_engine, tmp_path):
    """A gateway in front of a recorder of the scripted engine: its url, store, recorder and admin key."""
    from roost.rollout.gateway.config import GatewayConfig
    from roost.rollout.gateway.launch import GatewayThread

    store = tmp_path / "trajectories.sqlite"
    with EngineRecorder(scripted_engine.url) as recorder:
        server = GatewayThread(GatewayConfig(engine_url=recorder.url, model="tiny", store_path=store))
        with server as url:
            yield url, store, recorder, server.admin_key
    script(scripted_engine, {"rules": [{"match": None, "reply": "OK."}]})


def config(fixtures_dir, command: str, **kwargs) -> EvalConfig:
    env_kwargs = {"fixtures_dir": str(fixtures_dir), "sandbox": {"backend": "bubblewrap"}}
    return command_eval(
        command,
        "swe",
        split="test",
        task_ids=("roost-fixtures__calc-1",),
        env_kwargs=env_kwargs,
        model="tiny",
        **kwargs,
    )


async def run_command(config: EvalConfig) -> list:
    """`roost run`'s episodes: eval with the command harness."""
    return (await play(config)).results


@pytest.mark.slow
@pytest.mark.parametrize(
    "replacement,reward", [("len(values)", 1.0), ("(len(values) + 1)", 0.0)], ids=["right-patch", "wrong-patch"]
)
async def test_command_agent_gets_the_env_verdict_token_exact(
    fixtures_dir, gateway, scripted_engine, tmp_path, replacement, reward
):
    url, store, recorder, admin_key = gateway
    script(scripted_engine, rules(replacement))
    (tmp_path / "agent.py").write_text(AGENT)
    [result] = await run_command(
        config(fixtures_dir, f"{sys.executable} {tmp_path / 'agent.py'}", base_url=url, admin_key=admin_key)
    )
    assert result.status == "ok" and result.exit_code == 0, (result.error, result.output_tail)
    assert result.reward == reward and result.reward_source == "env"
    assert token_exact_problems(store, result.session_id, recorder) == []


async def test_command_environment(fixtures_dir, gateway):
    url, _, _, admin_key = gateway
    [result] = await run_command(
        config(fixtures_dir, f'{sys.executable} -c "{ECHO_ENV}"', base_url=url, admin_key=admin_key, submit=False)
    )
    seen = json.loads(result.output_tail.splitlines()[0])
    assert seen["ROOST_BASE_URL"] == seen["OPENAI_BASE_URL"] == f"{url}/sessions/{result.session_id}/v1"
    assert seen["ROOST_SESSION_ID"] == result.session_id and seen["OPENAI_API_KEY"]
    assert seen["ANTHROPIC_BASE_URL"] == f"{url}/sessions/{result.session_id}"
    assert seen["ANTHROPIC_API_KEY"] == seen["OPENAI_API_KEY"]
    assert seen["ROOST_ENV_STEP_URL"].startswith("http://127.0.0.1:")
    assert result.output_tail.splitlines()[1] == "roost-fixtures__calc-1"
    assert result.reward is None and result.reward_source == "none"


async def test_reward_file_when_the_env_gives_no_verdict(fixtures_dir):
    command = f"{sys.executable} -c \"import json, os; json.dump({{'reward': 0.25}}, open(os.environ['ROOST_REWARD_FILE'], 'w'))\""
    [result] = await run_command(config(fixtures_dir, command, submit=False))
    assert result.status == "ok" and result.reward == 0.25 and result.reward_source == "file"


async def test_a_hanging_command_is_killed_and_graded(fixtures_dir):
    [result] = await run_command(config(fixtures_dir, "sleep 600 & sleep 600", timeout_s=2))
    assert result.status == "ok" and result.exit_code is None and result.seconds < 60
    assert result.reward == 0.0 and result.reward_source == "env"


@pytest.mark.parametrize(
    "replacement,reward", [("len(values)", 1.0), ("(len(values) + 1)", 0.0)], ids=["right-fix", "wrong-fix"]
)
async def test_a_workspace_command_edits_its_own_copy_and_that_diff_is_graded(fixtures_dir, replacement, reward):
    """A harness that edits files where it runs (Claude Code, Codex) gets the repository as its
    working directory; what it changed there (a new file too) is the submitted patch."""
    command = (
        f"sed -i 's/(len(values) - 1)/{replacement}/' calc/stats.py && echo note > NOTES.md && "
        'git log --oneline | wc -l && echo "$ROOST_WORKSPACE" && pwd'
    )
    [result] = await run_command(config(fixtures_dir, command, workspace=True))
    assert result.status == "ok" and result.exit_code == 0, (result.error, result.output_tail)
    commits, workspace, cwd = result.output_tail.split()
    assert int(commits) >= 1 and workspace == cwd  # the repository, its history with it
    assert result.reward == reward and result.reward_source == "env"
    # the fixture repository and the sandbox's tree are untouched
    assert "(len(values) - 1)" in (fixtures_dir / "repos" / "calc" / "calc" / "stats.py").read_text()


async def test_a_workspace_command_on_an_env_without_one_is_an_agent_error():
    [result] = await run_command(
        command_eval(
            "true", "roost.tests.agents.faulty_envs:make_factory", split="train", task_ids=("t0",), workspace=True
        )
    )
    assert result.status == "agent_error" and "no workspace" in result.error, result.error


async def test_a_broken_reward_file_is_an_agent_error(fixtures_dir):
    command = 'echo not-json > "$ROOST_REWARD_FILE"'
    [result] = await run_command(config(fixtures_dir, command, submit=False))
    assert result.status == "agent_error" and "reward file" in result.error


async def test_a_recorded_command_gets_its_session_key_and_not_the_server_keys(
    scripted_gateway, admin_key, monkeypatch
):
    # Keys given to `roost run` through the environment must not reach the harness it runs.
    monkeypatch.setenv("ROOST_ADMIN_KEY", admin_key)
    monkeypatch.setenv("ROOST_ENGINE_KEY", "rek-the-engine-key")
    shown = "import json, os; print(json.dumps({k: os.environ.get(k) for k in sorted(os.environ) if 'KEY' in k}))"
    [result] = await run_command(
        command_eval(
            f'{sys.executable} -c "{shown}"',
            "roost.tests.agents.faulty_envs:make_factory",
            split="train",
            task_ids=("t0",),
            base_url=scripted_gateway,
            admin_key=admin_key,
            submit=False,
        )
    )
    assert result.status == "ok" and result.session_id, result.error
    seen = json.loads(result.output_tail.splitlines()[0])
    assert seen["OPENAI_API_KEY"].startswith("rsk-")
    assert "ROOST_ADMIN_KEY" not in seen and "ROOST_ENGINE_KEY" not in seen
