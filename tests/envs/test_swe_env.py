"""The SWE env served over HTTP: tools, submission, grading, and bad input ending bounded."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
import time

import pytest

from roost.envs.client import EnvClient
from roost.envs.episodes import ManagerConfig
from roost.envs.errors import EpisodeFinishedError, InvalidActionError, NoWorkspaceError, UnknownTaskError
from roost.envs.protocol import TextAction, ToolCall
from roost.envs.serve import ServerConfig, serving
from roost.envs.swe.env import make_factory
from roost.envs.swe.fixtures import make_fixtures
from roost.envs.swe.loaders import TaskFormatError

CALC = "roost-fixtures__calc-1"


@pytest.fixture(scope="module")
def fixtures_dir(tmp_path_factory):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    folder = tmp_path_factory.mktemp("swe") / "fixtures"
    make_fixtures(folder)
    return folder


@pytest.fixture
async def client(fixtures_dir):
    kwargs = {
        "fixtures_dir": str(fixtures_dir),
        "sandbox": {"backend": "bubblewrap"},
        "command_timeout_s": 3,
        "output_limit_bytes": 65536,
        "max_steps": 8,
    }
    config = ServerConfig("swe", kwargs, port=0, manager=ManagerConfig(workers=1, max_episodes=4))
    async with serving(config) as url:
        async with EnvClient(url) as env_client:
            yield env_client


def bash(command: str) -> ToolCall:
    return ToolCall("bash", json.dumps({"command": command}))


async def test_info_and_tasks(client):
    info = await client.info()
    assert info.name == "swe" and {t["function"]["name"] for t in info.tools} >= {"bash", "submit", "str_replace"}
    tasks = await client.tasks("test")
    assert CALC in {t.id for t in tasks} and len(tasks) >= 3
    assert await client.tasks("train") == []


async def test_fix_with_file_tools_and_submit(client):
    episode, reset = await client.create(task_id=CALC)
    assert "mean([1, 2, 3])" in reset.observation.text and reset.info["workdir"] == "/testbed"
    assert "FAIL_TO_PASS" not in json.dumps(reset.info)
    step = await client.step(episode, ToolCall("read_file", {"path": "calc/stats.py", "start_line": 15}))
    assert "(len(values) - 1)" in step.observation.text
    step = await client.step(
        episode, ToolCall("str_replace", {"path": "calc/stats.py", "old": "(len(values) - 1)", "new": "len(values)"})
    )
    assert "replaced 1" in step.observation.text
    step = await client.step(episode, ToolCall("submit", "{}"))
    assert step.terminated and step.reward == 1.0 and step.info["status"] == "RESOLVED_FULL"
    assert "calc/stats.py" in step.info["patch"]
    with pytest.raises(EpisodeFinishedError):
        await client.step(episode, bash("ls"))


async def test_mini_swe_agent_submission_and_a_wrong_fix(client):
    episode, _ = await client.create(task_id=CALC)
    await client.step(episode, TextAction("sed -i 's/(len(values) - 1)/(len(values) + 1)/' calc/stats.py"))
    step = await client.step(episode, bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"))
    assert step.terminated and step.reward == 0.0 and step.info["status"] == "RESOLVED_NO"
    assert step.info["patch_source"] == "sandbox_diff"


async def test_submitted_patch_text_is_graded(client, fixtures_dir):
    episode, _ = await client.create(task_id=CALC)
    reference = json.loads((fixtures_dir / "tasks.jsonl").read_text().splitlines()[0])["patch"]
    await client.step(episode, ToolCall("write_file", {"path": "patch.txt", "content": reference}))
    step = await client.step(episode, bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt"))
    assert step.info["patch_source"] == "submission" and step.reward == 1.0


async def test_the_workspace_is_the_sandboxs_tree_and_a_submitted_patch_is_graded(client, fixtures_dir):
    episode, _ = await client.create(task_id=CALC)
    await client.step(episode, bash("echo scratch > notes.txt"))
    with tarfile.open(fileobj=io.BytesIO(await client.workspace(episode)), mode="r:gz") as tar:
        names = set(tar.getnames())
        assert tar.extractfile("./notes.txt").read() == b"scratch\n"  # the tree as it is now
    assert {"./calc/stats.py", "./.git/HEAD"} <= names
    reference = json.loads((fixtures_dir / "tasks.jsonl").read_text().splitlines()[0])["patch"]
    step = await client.step(episode, ToolCall("submit", {"patch": reference}))
    assert step.info["patch_source"] == "submission" and step.reward == 1.0
    with pytest.raises(EpisodeFinishedError):
        await client.workspace(episode)
    # a given patch is graded as given, even one that is not a patch (it does not apply)
    episode, _ = await client.create(task_id=CALC)
    step = await client.step(episode, ToolCall("submit", {"patch": "not a diff"}))
    assert step.info["patch_source"] == "submission" and step.reward == 0.0, step.info


async def test_an_env_without_a_workspace_says_so(tmp_path):
    config = ServerConfig("roost.tests.agents.faulty_envs:make_factory", {}, port=0)
    async with serving(config) as url, EnvClient(url) as env_client:
        episode, _ = await env_client.create(task_id="t0")
        with pytest.raises(NoWorkspaceError, match="no workspace"):
            await env_client.workspace(episode)
        await env_client.step(episode, TextAction("ok"))  # the episode goes on


async def test_bad_commands_end_bounded_and_leave_the_host_alone(client, fixtures_dir):
    episode, reset = await client.create(task_id=CALC)
    start = time.monotonic()
    hang = await client.step(episode, bash("sleep 600"))
    assert "ran past 3s" in hang.observation.text and hang.info["outcome"] == "timeout"
    flood = await client.step(episode, bash("yes roost"))
    assert flood.info["outcome"] == "output_limit" and len(flood.observation.text) < 20_000
    if reset.info["limits_enforced"]:  # without a pids limit a fork bomb would hurt this machine
        bomb = await client.step(episode, bash("bomb() { bomb | bomb & }; bomb"))
        # bounded either way: by time, by the pids limit, or by its flood of "fork: retry" errors
        assert bomb.info["outcome"] in ("timeout", "exited", "output_limit")
    net = await client.step(episode, bash("(exec 3<>/dev/tcp/127.0.0.1/22) 2>&1 || echo no-network"))
    assert "no-network" in net.observation.text
    escape = await client.step(episode, bash(f"rm -rf {fixtures_dir} /etc/hostname 2>&1; touch /usr/x 2>&1; echo done"))
    assert "done" in escape.observation.text
    alive = await client.step(episode, bash("echo alive"))
    assert "alive" in alive.observation.text and not alive.done
    assert time.monotonic() - start < 60
    assert (fixtures_dir / "tasks.jsonl").is_file()
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=fixtures_dir / "repos" / "calc", capture_output=True, text=True
    )
    assert status.stdout == ""


async def test_invalid_actions_unknown_tasks_and_the_step_limit(client):
    with pytest.raises(UnknownTaskError):
        await client.create(task_id="no-such-task")
    episode, _ = await client.create(task_id=CALC)
    with pytest.raises(InvalidActionError, match="unknown tool"):
        await client.step(episode, ToolCall("rm_rf", "{}"))
    with pytest.raises(InvalidActionError, match="not valid JSON"):
        await client.step(episode, ToolCall("bash", "{oops"))
    with pytest.raises(InvalidActionError, match="missing"):
        await client.step(episode, ToolCall("write_file", {"path": "x"}))
    last = None
    for _ in range(8):
        last = await client.step(episode, bash("true"))
        if last.done:
            break
    assert last.truncated and not last.terminated and last.reward == 0.0
    assert last.info["exit_reason"] == "step_limit" and last.info["status"] == "empty_patch"


def test_task_files_with_missing_fields_fail_at_load(tmp_path):
    bad = tmp_path / "tasks.jsonl"
    bad.write_text(json.dumps({"instance_id": "x", "repo": "o/r", "problem_statement": "p"}) + "\n")
    with pytest.raises(TaskFormatError, match="base_commit"):
        make_factory(tasks=str(bad))
