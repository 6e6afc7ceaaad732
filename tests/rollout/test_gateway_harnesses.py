"""Claude Code and Codex, unchanged, against a session URL of a real gateway over the tiny
model: each runs a small coding task as users run it (list the files, read one, fix it, run
it), so it sends what it sends in real use (Claude Code's `system` turn inside `messages`,
`context_management`, `output_config` and adaptive thinking; Codex's developer messages,
`namespace` and `web_search` tools). The scripted sampler makes the model's replies tool calls
in the harness's own tool names; the harness runs them, the file is fixed, and every call is in
the store, token-exact, each turn extending the one before.

Each harness runs in two versions: the pinned one and an older published one users still run
(Claude Code 2.1.197, Codex 0.169.0: Codex published no 0.170), installed by `make harnesses`
into `.npm-harnesses/` and `.npm-harnesses/previous/`. Without them these tests skip, unless
ROOST_REQUIRE_HARNESSES=1 (set by `.ci/run`) makes their absence a failure. Their system
prompts and tool lists (~8-19k tokens) are past the tiny model's 4096 positions: the engine
here runs it with `--context-length 65536` (RoPE has no table to outgrow). A run is five calls;
the first prefills the whole prompt (~1-13 s on CPU), the others only what is new.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.keys import bearer
from roost.tests.rollout.gateway_helpers import (
    EngineSpy,
    assert_token_exact,
    new_session,
    spied_gateway,
    stored_calls,
)

HARNESSES = Path(__file__).resolve().parents[2] / ".npm-harnesses"
PREFIXES = {"pinned": HARNESSES, "previous": HARNESSES / "previous"}
CLAUDE = "node_modules/@anthropic-ai/claude-code"
CODEX = "node_modules/@openai/codex"
HARNESS_TIMEOUT_S = 300
TASK = "Fix the greeting in greet.py: list the files, read it, correct the typo, then run it."
FINAL = "Done: greet.py now prints Hello, world!"


def _installed(prefix: Path, package: str) -> Path:
    if not (HARNESSES / ".stamp").exists() or not (prefix / package / "package.json").exists():
        reason = f"{package} is not installed in {prefix}; run `make harnesses`"
        if os.environ.get("ROOST_REQUIRE_HARNESSES") == "1":
            pytest.fail(f"ROOST_REQUIRE_HARNESSES=1 but {reason}")
        pytest.skip(reason)
    return prefix / package


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """A gateway on a long-context scripted tiny engine behind a spy: (server, store, spy, engine)."""
    folder = tmp_path_factory.mktemp("harnesses")
    script = folder / "script.json"
    script.write_text(json.dumps({"rules": [{"match": None, "reply": "Done."}]}))
    engine = EngineProcess(
        "tiny", scripted=True, script=script, extra_args=["--context-length", "65536", "--max-running", "4"]
    )
    with engine, spied_gateway(engine.url, folder / "trajectories.sqlite") as (server, store, spy):
        yield server, store, spy, engine


def _call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def _script(engine: EngineProcess, steps: list[tuple[str, str]]) -> None:
    """Each step: the regex of what the harness just sent back (a tool's output), and the reply.
    The rule matching latest in the prompt wins, so the newest tool output decides."""
    rules = [{"match": match, "reply": reply} for match, reply in steps] + [{"match": None, "reply": "Done."}]
    resp = httpx.post(f"{engine.url}/roost/scripted_sampler", json={"rules": rules}, headers=bearer(engine.api_key))
    resp.raise_for_status()


def _workspace(tmp_path: Path) -> tuple[Path, Path]:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    (work / "greet.py").write_text('print("Helo, world!")\n')
    (work / "notes.txt").write_text("remember the milk\n")
    return work, home


def _run(argv: list[str], env: dict[str, str], cwd: Path, home: Path) -> subprocess.CompletedProcess:
    base = {k: os.environ[k] for k in ("PATH", "LANG", "TMPDIR") if k in os.environ}
    return subprocess.run(
        argv,
        env={**base, "HOME": str(home), **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=HARNESS_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


def _called(response: dict) -> list[str]:
    """The tools a recorded reply called (a Messages reply is stored as a chat message)."""
    if "output" in response:
        return [item["name"] for item in response["output"] if item["type"] == "function_call"]
    return [t["function"]["name"] for t in response["message"].get("tool_calls") or ()]


def _check(
    done: subprocess.CompletedProcess,
    work: Path,
    store: Path,
    session: dict,
    spy: EngineSpy,
    endpoint: str,
    tools: list[str],
) -> list:
    """The task done through the harness's own tools, every call recorded token-exact, each
    extending the one before (one growing sample); answers the calls."""
    output = f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"exit {done.returncode}\n{output}"
    assert FINAL in done.stdout, output
    assert (work / "greet.py").read_text() == 'print("Hello, world!")\n'
    calls = stored_calls(store, session["session_id"])
    assert {c.endpoint for c in calls} == {endpoint}
    called = [_called(c.response) for c in calls]
    assert called == [[name] for name in tools] + [[]], output
    assert min(len(c.prompt_ids) for c in calls) > 4096  # the harness's own system prompt and tools
    assert calls[0].kind == "root"
    for before, call in zip(calls, calls[1:]):
        assert (call.kind, call.parent_call_id) == ("extend", before.call_id), f"call {call.seq} forked"
        assert call.shared_prefix_len == len(before.prompt_ids) + len(before.sampled_ids)
    assert assert_token_exact(store, session["session_id"], spy) == len(calls)
    return calls


@pytest.mark.parametrize("version", PREFIXES)
def test_claude_code_fixes_a_file_through_a_session(gateway, tmp_path, version):
    server, store, spy, engine = gateway
    claude = _installed(PREFIXES[version], CLAUDE)
    work, home = _workspace(tmp_path)
    path = str(work / "greet.py")
    _script(
        engine,
        [
            ("Fix the greeting in greet", _call("Bash", {"command": "ls", "description": "List the files"})),
            (r"notes\.txt", _call("Read", {"file_path": path})),
            (r'Helo, world!"\)', _call("Edit", {"file_path": path, "old_string": "Helo", "new_string": "Hello"})),
            (
                "has been updated",
                _call("Bash", {"command": "python3 greet.py && echo ran-ok", "description": "Run it"}),
            ),
            (r"<tool_response>\n[^<]*ran-ok", FINAL),
        ],
    )
    session = new_session(server, group_id=f"g-claude-code-{version}")
    done = _run(
        [
            "node",
            str(claude / "cli-wrapper.cjs"),
            "-p",
            TASK,
            "--model",
            "tiny",
            "--allowedTools",
            "Bash",
            "Read",
            "Edit",
            "--max-turns",
            "8",
        ],
        {
            "ANTHROPIC_BASE_URL": session["base_url"].removesuffix("/v1"),
            "ANTHROPIC_API_KEY": session["key"],
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        },
        work,
        home,
    )
    calls = _check(done, work, store, session, spy, "messages", ["Bash", "Read", "Edit", "Bash"])
    first = calls[0].request
    assert "system" in [m["role"] for m in first["messages"]]  # refused with a 400 before issue 30
    assert first["context_management"]["edits"][0]["type"] == "clear_thinking_20251015"
    assert any("output_config.effort" in note for note in calls[0].response["notes"])


@pytest.mark.parametrize("version", PREFIXES)
def test_codex_fixes_a_file_through_a_session(gateway, tmp_path, version):
    server, store, spy, engine = gateway
    codex = _installed(PREFIXES[version], CODEX)
    work, home = _workspace(tmp_path)
    _script(
        engine,
        [
            ("Fix the greeting in greet", _call("exec_command", {"cmd": "ls"})),
            (r"notes\.txt", _call("exec_command", {"cmd": "cat greet.py"})),
            (r'Helo, world!"\)', _call("exec_command", {"cmd": "sed -i s/Helo/Hello/ greet.py"})),
            (
                r"sed -i s/Helo/Hello/ greet\.py(?s:.*)<tool_response>",
                _call("exec_command", {"cmd": "python3 greet.py && echo ran-ok"}),
            ),
            (r"<tool_response>\n[^<]*ran-ok", FINAL),
        ],
    )
    session = new_session(server, group_id=f"g-codex-{version}")
    codex_home = home / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(
        'model = "tiny"\nmodel_provider = "roost"\n\n[model_providers.roost]\nname = "roost"\n'
        f'base_url = "{session["base_url"]}"\nenv_key = "ROOST_SESSION_KEY"\nwire_api = "responses"\n'
    )
    # The sandbox is the test's temporary folder; Codex's own needs kernel features CI may lack.
    done = _run(
        [
            str(codex / "bin/codex.js"),
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            TASK,
        ],
        {"CODEX_HOME": str(codex_home), "ROOST_SESSION_KEY": session["key"]},
        work,
        home,
    )
    calls = _check(done, work, store, session, spy, "responses", ["exec_command"] * 4)
    first = calls[0].request
    assert {"developer", "user"} <= {item.get("role") for item in first["input"]}
    assert {"namespace", "web_search"} <= {tool["type"] for tool in first["tools"]}
    assert any("web_search" in note and "left out" in note for note in calls[0].response["notes"])
