"""Claude Code and Codex, unchanged, against a session URL of a real gateway over the tiny
model (scripted replies): each harness runs, exits cleanly, and every call it made is in the
store, token-exact.

The harnesses come from npm, installed by `make harnesses` into `.npm-harnesses/`. Without
that folder these tests skip, unless ROOST_REQUIRE_HARNESSES=1 (set by `.ci/run`) makes its
absence a failure. Their system prompts and tool lists are ~20k tokens, past the tiny model's
4096 positions: the engine here runs it with `--context-length 65536` (RoPE has no table to
outgrow, and the garbage replies do not matter)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from roost.rollout.engine.launch import EngineProcess
from roost.tests.rollout.gateway_helpers import (
    EngineSpy, assert_token_exact, new_session, spied_gateway, stored_calls,
)

HARNESSES = Path(__file__).resolve().parents[2] / ".npm-harnesses"
CLAUDE = HARNESSES / "node_modules/@anthropic-ai/claude-code/cli-wrapper.cjs"
CODEX = HARNESSES / "node_modules/.bin/codex"
HARNESS_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def harnesses() -> Path:
    if not (HARNESSES / ".stamp").exists():
        reason = f"the npm harnesses are not installed in {HARNESSES}; run `make harnesses`"
        if os.environ.get("ROOST_REQUIRE_HARNESSES") == "1":
            pytest.fail(f"ROOST_REQUIRE_HARNESSES=1 but {reason}")
        pytest.skip(reason)
    return HARNESSES


@pytest.fixture(scope="module")
def gateway(harnesses, tmp_path_factory):
    """A gateway on a long-context scripted tiny engine behind a spy: (server, store, spy)."""
    folder = tmp_path_factory.mktemp("harnesses")
    script = folder / "script.json"
    script.write_text(json.dumps({"rules": [{"match": None, "reply": "Done."}]}))
    engine = EngineProcess("tiny", scripted=True, script=script,
                           extra_args=["--context-length", "65536", "--max-running", "4"])
    with engine, spied_gateway(engine.url, folder / "trajectories.sqlite") as running:
        yield running


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    base = {k: os.environ[k] for k in ("PATH", "LANG", "TMPDIR") if k in os.environ}
    return subprocess.run(argv, env={**base, "HOME": str(cwd), **env}, cwd=cwd, capture_output=True, text=True,
                          timeout=HARNESS_TIMEOUT_S, stdin=subprocess.DEVNULL)


def _check(done: subprocess.CompletedProcess, store: Path, session: dict, spy: EngineSpy, endpoint: str) -> None:
    output = f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"exit {done.returncode}\n{output}"
    calls = stored_calls(store, session["session_id"])
    assert calls and {c.endpoint for c in calls} == {endpoint}
    assert max(len(c.prompt_ids) for c in calls) > 4096  # the harness's own system prompt and tools
    assert assert_token_exact(store, session["session_id"], spy) == len(calls)


def test_claude_code_runs_through_a_session(gateway, tmp_path):
    server, store, spy = gateway
    session = new_session(server, group_id="g-claude-code")
    done = _run(["node", str(CLAUDE), "-p", "Say hello.", "--model", "tiny"], {
        "ANTHROPIC_BASE_URL": session["base_url"].removesuffix("/v1"), "ANTHROPIC_API_KEY": session["key"],
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}, tmp_path)
    _check(done, store, session, spy, "messages")
    assert "Done." in done.stdout


def test_codex_runs_through_a_session(gateway, tmp_path):
    server, store, spy = gateway
    session = new_session(server, group_id="g-codex")
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "tiny"\nmodel_provider = "roost"\n\n[model_providers.roost]\nname = "roost"\n'
        f'base_url = "{session["base_url"]}"\nenv_key = "ROOST_SESSION_KEY"\nwire_api = "responses"\n')
    done = _run([str(CODEX), "exec", "--skip-git-repo-check", "Say hello."],
                {"CODEX_HOME": str(home), "ROOST_SESSION_KEY": session["key"]}, tmp_path)
    _check(done, store, session, spy, "responses")
