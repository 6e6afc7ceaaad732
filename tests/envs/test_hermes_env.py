"""The Hermes env without a model: its task set, its verifier, its actions, and hermes-agent's
own tools executing in a bubblewrap sandbox."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from roost.envs.errors import InvalidActionError, UnknownTaskError
from roost.envs.hermes.env import HermesEnvConfig, HermesShared, load_hermes_tasks, make_factory
from roost.envs.hermes.task import HermesTask, TaskFormatError, load_tasks
from roost.envs.hermes.verifier import verify
from roost.envs.protocol import TextAction, ToolCall

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
BWRAP = {"sandbox": {"backend": "bubblewrap"}}


def test_the_offline_task_set_loads_with_both_splits():
    tasks = load_hermes_tasks(HermesEnvConfig())
    assert len(tasks) >= 8 and {t.split for t in tasks} == {"train", "test"}
    assert all(t.solution and t.instruction for t in tasks)


@pytest.mark.parametrize(
    "row,message",
    [
        ({"id": "x", "instruction": "i", "verifier": {"command": "true", "reward": "output_match"}}, "pattern"),
        ({"id": "x", "instruction": "i", "verifier": {"command": "true"}, "files": {"/etc/passwd": ""}}, "relative"),
        ({"id": "x", "instruction": "i", "verifier": {"command": "true"}, "extra": 1}, "extra"),
    ],
)
def test_bad_tasks_are_refused_with_the_reason(tmp_path, row, message):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(TaskFormatError, match=message):
        load_tasks(path)


def test_duplicate_task_ids_are_refused(tmp_path):
    row = {"id": "x", "instruction": "i", "verifier": {"command": "true"}}
    path = tmp_path / "tasks.jsonl"
    path.write_text(f"{json.dumps(row)}\n# a comment\n\n{json.dumps(row)}\n")
    with pytest.raises(TaskFormatError, match="twice"):
        load_tasks(path)


@needs_bwrap
async def test_every_task_fails_as_given_and_passes_with_its_solution():
    shared = HermesShared(HermesEnvConfig(**BWRAP), {})
    before = {}
    for task in load_hermes_tasks(shared.config):
        sandbox = await shared.start_sandbox(task)
        try:
            before[task.id] = (await verify(sandbox, task)).reward
            assert before[task.id] < 1.0, f"{task.id} is solved before the agent acts"
            result = await sandbox.exec(task.solution, timeout_s=30)
            assert result.ok, f"{task.id}: solution failed: {result.output}"
            after = await verify(sandbox, task)
            assert after.reward == 1.0, f"{task.id}: {after.reason}: {after.output}"
        finally:
            await sandbox.close()
    assert before["fix-stats"] == 0.25  # fix-stats: one of four checks passes as given (partial credit)


@needs_bwrap
async def test_verifier_files_are_hidden_until_verification():
    task = HermesTask.model_validate(
        {
            "id": "hidden",
            "instruction": "i",
            "verifier": {"command": "test -f secret"},
            "verifier_files": {"secret": "42\n"},
        }
    )
    sandbox = await HermesShared(HermesEnvConfig(**BWRAP), {}).start_sandbox(task)
    try:
        assert (await sandbox.exec("test -e secret")).exit_code == 1
        assert (await verify(sandbox, task)).reward == 1.0
    finally:
        await sandbox.close()


async def test_actions_are_checked_before_anything_runs():
    env = make_factory(**BWRAP)()
    assert [t.id for t in await env.tasks("test")] == ["sort-unique", "fix-stats", "word-count"]
    with pytest.raises(UnknownTaskError):
        await env.reset(task_id="hello-file", split="test")
    if shutil.which("bwrap") is None:
        return
    reset = await env.reset(task_id="hello-file")
    try:
        assert reset.tools[0]["function"]["name"] == "run_agent" and "hello world" in reset.observation.text
        with pytest.raises(InvalidActionError, match="tool call"):
            await env.step(TextAction("ls"))
        with pytest.raises(InvalidActionError, match="base_url"):
            await env.step(ToolCall("run_agent", {"wait_s": 1}))
        with pytest.raises(InvalidActionError, match="unknown tool"):
            await env.step(ToolCall("terminal", {"command": "ls"}))
    finally:
        await env.close()


@needs_bwrap
def test_hermes_agent_tools_run_in_the_sandbox():
    """hermes-agent's own terminal and file tools, called as its agent loop calls them."""
    pytest.importorskip("run_agent", reason="hermes-agent is not installed")
    shared = HermesShared(HermesEnvConfig(**BWRAP), {})
    loop = shared.prepare()
    import model_tools

    from roost.envs.hermes.backend import SandboxTerminal, attach, detach

    task = HermesTask.model_validate({"id": "t", "instruction": "i", "verifier": {"command": "true"}})
    sandbox = asyncio.run_coroutine_threadsafe(shared.start_sandbox(task), loop.loop).result()
    terminal = SandboxTerminal(sandbox, loop.loop, timeout=30)
    attach("roost-test-tools", terminal)

    def call(name: str, **args) -> dict:
        return json.loads(model_tools.handle_function_call(name, args, task_id="roost-test-tools"))

    try:
        terminal.init_session()
        assert call("terminal", command="pwd && touch made-here")["output"] == "/workspace"
        assert call("write_file", path="sub/x.txt", content="abc\n")["bytes_written"] == 4
        assert call("read_file", path="sub/x.txt")["content"].startswith("1|abc")
        assert call("patch", path="sub/x.txt", old_string="abc", new_string="xyz")["success"] is True
        assert call("search_files", pattern="xyz", path="sub")["total_count"] == 1
        assert call("terminal", command="cd sub && pwd")["output"] == "/workspace/sub"
        assert call("terminal", command="cat x.txt")["output"] == "xyz"  # the shell's cwd persists
        timed_out = call("terminal", command="sleep 20", timeout=2)
        assert timed_out["exit_code"] == 124 and "timed out" in timed_out["output"]
        host = asyncio.run_coroutine_threadsafe(sandbox.exec("ls /workspace"), loop.loop).result()
        assert "made-here" in host.output  # it ran in the sandbox, not in the test's own folder
    finally:
        detach("roost-test-tools")
        asyncio.run_coroutine_threadsafe(sandbox.close(), loop.loop).result()


@pytest.mark.parametrize(
    "result,status",
    [
        ({"completed": True, "turn_exit_reason": "text_response(finish_reason=stop)"}, "finished"),
        ({"completed": False, "turn_exit_reason": "max_iterations_reached(8/8)"}, "max_iterations"),
        (
            {
                "completed": False,
                "failed": True,
                "final_response": "API call failed after 3 retries: Connection error.",
                "error": "Connection error.",
                "failure_reason": "timeout",
            },
            "model_unavailable",
        ),
        ({"completed": False, "partial": True, "error": "Model generated invalid tool call: x"}, "failed"),
    ],
)
def test_how_a_conversation_ended(result, status):
    from roost.envs.hermes.conversation import Outcome

    assert Outcome(result=result).status == status
    assert Outcome(error=RuntimeError("boom")).status == "crashed"


def test_the_model_url_can_be_pointed_at_the_host_of_a_container():
    from roost.envs.hermes.env import HermesEnv, HermesShared

    env = HermesEnv(HermesShared(HermesEnvConfig(base_url_host="host.docker.internal"), {}))
    url = env._model_url("http://127.0.0.1:8000/sessions/abc/v1")
    assert url == "http://host.docker.internal:8000/sessions/abc/v1"
