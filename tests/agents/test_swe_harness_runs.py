"""Claude Code, Codex and mini-swe-agent play an episode of a task made from a real project (the
shipped set, `tasks=pypi`) to its grade, through a real gateway over the scripted tiny model.

The scripted model does what a user's model would on the task: it runs the failing test, applies
a fix, runs the test again and stops. Claude Code and Codex run unchanged through
`roost run --workspace`: they edit a copy of the episode's repository in their own working
directory, and their diff is what the env grades. mini-swe-agent acts in the env's sandbox.
Claude Code's and Codex's prompts (~10-20k tokens) are past the tiny model's 4096 positions: the
engine runs with `--context-length 65536`, as in tests/rollout/test_gateway_harnesses.py.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys

import httpx
import pytest

from roost.agents.command import command_eval
from roost.agents.evaluate import EvalConfig, play
from roost.envs.swe.task_making import shipped
from roost.rollout.engine.launch import EngineProcess
from roost.rollout.keys import bearer
from roost.rollout.store.reader import TrajectoryReader
from roost.tests.rollout.test_gateway_harnesses import CLAUDE, CODEX, HARNESSES, _installed

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="the SWE env's sandboxes need bubblewrap"),
]

OBSERVATION = '$(python3 -c \'import json, os; print(json.loads(os.environ["ROOST_TASK_JSON"])["observation"])\')'
FINAL = "Fixed: the failing test passes again."


@pytest.fixture(scope="module")
def task() -> dict:
    """The first task of the shipped set's held-out split (a project with a flat layout)."""
    with gzip.open(shipped.TASKS, "rt") as rows:
        tasks = [json.loads(line) for line in rows]
    return next(t for t in tasks if t["split"] == "test" and t["repo"] == "pypi/inflection")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """A gateway on a long-context scripted tiny engine: (url, admin key, store, engine)."""
    from roost.rollout.gateway.config import GatewayConfig
    from roost.rollout.gateway.launch import GatewayThread

    folder = tmp_path_factory.mktemp("swe-harnesses")
    script = folder / "script.json"
    script.write_text(json.dumps({"rules": [{"match": None, "reply": "Done."}]}))
    engine = EngineProcess(
        "tiny", scripted=True, script=script, extra_args=["--context-length", "65536", "--max-running", "4"]
    )
    store = folder / "trajectories.sqlite"
    with engine:
        server = GatewayThread(GatewayConfig(engine_url=engine.url, model="tiny", store_path=store))
        with server as url:
            yield url, server.admin_key, store, engine


def _call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def _commands(task: dict) -> tuple[str, str]:
    """The failing test's run, and the fix: the task's gold patch, applied with git."""
    test = f"PYTHONPATH=. {sys.executable} -m pytest -q --tb=no -p no:cacheprovider '{task['FAIL_TO_PASS'][0]}'"
    fix = f"git apply <<'ROOST_PATCH'\n{task['patch']}ROOST_PATCH\necho patched-ok"
    return test, fix


def _script(engine: EngineProcess, tool: str, argument: str, task: dict, extra: dict | None = None) -> None:
    """Test, fix, test, stop: each reply chosen by the newest tool output in the prompt."""
    test, fix = _commands(task)

    def run(command: str) -> str:
        return _call(tool, {argument: command, **(extra or {})})

    rules = [
        {"match": None, "reply": "Done."},
        {"match": "After a recent change, these tests", "reply": run(test)},
        {"match": r"<tool_response>\n[^<]*1 failed", "reply": run(fix)},
        {"match": r"<tool_response>\n[^<]*patched-ok", "reply": run(test)},
        {"match": r"<tool_response>\n[^<]*1 passed", "reply": FINAL},
    ]
    resp = httpx.post(f"{engine.url}/roost/scripted_sampler", json={"rules": rules}, headers=bearer(engine.api_key))
    resp.raise_for_status()


def _config(gateway, task: dict, agent: str, **kwargs):
    url, admin_key, _, _ = gateway
    return EvalConfig(
        "swe",
        agent=agent,
        split="test",
        task_ids=(task["instance_id"],),
        episodes=1,
        env_kwargs={"tasks": shipped.NAME, "sandbox": {"backend": "bubblewrap"}},
        base_url=url,
        admin_key=admin_key,
        model="tiny",
        progress=False,
        **kwargs,
    )


async def _played(config: EvalConfig):
    [result] = (await play(config)).results
    return result


def _check(result, gateway, calls: int) -> None:
    """Graded resolved from the harness's own edit; every model call of it recorded."""
    _, _, store, _ = gateway
    assert result.status == "ok" and result.reward == 1.0, (result.error, result.output_tail[-3000:])
    with TrajectoryReader(store) as reader:
        recorded = reader.calls(result.session_id)
    assert len(recorded) == calls, [c.response for c in recorded]


async def _fixes_in_its_workspace(gateway, task: dict, command: str) -> None:
    """`roost run --workspace --command COMMAND` on the task: resolved, in four calls (test, fix,
    test, the final answer)."""
    config = command_eval(command, "swe", workspace=True, timeout_s=600)
    result = await _played(_config(gateway, task, config.agent, agent_kwargs=config.agent_kwargs))
    assert FINAL in result.output_tail, result.output_tail[-3000:]
    _check(result, gateway, calls=4)


async def test_claude_code_fixes_a_made_task_in_its_workspace(gateway, task, tmp_path):
    claude = _installed(HARNESSES, CLAUDE)
    _script(gateway[3], "Bash", "command", task, {"description": "Run it"})
    command = (
        f"HOME={tmp_path} CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 node {claude / 'cli-wrapper.cjs'} "
        f'-p "{OBSERVATION}" --model tiny --allowedTools Bash --max-turns 8'
    )
    await _fixes_in_its_workspace(gateway, task, command)


async def test_codex_fixes_a_made_task_in_its_workspace(gateway, task, tmp_path):
    codex = _installed(HARNESSES, CODEX)
    _script(gateway[3], "exec_command", "cmd", task)
    (tmp_path / ".codex").mkdir()
    provider = '{name="roost",base_url="\'"$OPENAI_BASE_URL"\'",env_key="OPENAI_API_KEY",wire_api="responses"}'
    command = (
        f"HOME={tmp_path} CODEX_HOME={tmp_path / '.codex'} {codex / 'bin/codex.js'} exec --skip-git-repo-check "
        f"--dangerously-bypass-approvals-and-sandbox -m tiny -c model_provider=roost "
        f"-c 'model_providers.roost={provider}' \"{OBSERVATION}\""
    )
    await _fixes_in_its_workspace(gateway, task, command)


async def test_mini_swe_agent_fixes_a_made_task_in_the_sandbox(gateway, task):
    test, fix = _commands(task)
    # mini-swe-agent's bash runs in the env's sandbox, which has the host's Python on PATH
    test = test.replace(sys.executable, "python")
    submit = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
    rules = [
        {"match": None, "reply": _call("bash", {"command": submit})},
        {"match": "<pr_description>", "reply": _call("bash", {"command": test})},
        {"match": r"<output>\n[^<]*1 failed", "reply": _call("bash", {"command": fix})},
        {"match": r"<output>\n[^<]*patched-ok", "reply": _call("bash", {"command": test})},
        {"match": r"<output>\n[^<]*1 passed", "reply": _call("bash", {"command": submit})},
    ]
    engine = gateway[3]
    resp = httpx.post(f"{engine.url}/roost/scripted_sampler", json={"rules": rules}, headers=bearer(engine.api_key))
    resp.raise_for_status()
    result = await _played(_config(gateway, task, "mini-swe-agent", max_turns=8))
    _check(result, gateway, calls=4)  # test, fix, test, submit
