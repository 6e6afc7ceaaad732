"""The commands users run: `roost serve alfworld` + `roost eval --env-url`, `roost eval` alone, and
`roost run --command`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from roost.serving.process import start_reporting, stop_process

ROOST = [sys.executable, "-m", "roost.cli.main"]


def _roost(*args: str, env: dict | None = None) -> dict:
    done = subprocess.run([*ROOST, *args], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_serve_then_eval_the_expert_against_it(alfworld_data: Path, tmp_path: Path):
    port_file = tmp_path / "port"
    server, port = start_reporting(
        [
            *ROOST,
            "serve",
            "alfworld",
            "--port",
            "0",
            "--port-file",
            str(port_file),
            "--workers",
            "1",
            "--data-dir",
            str(alfworld_data),
        ],
        port_file,
        "roost serve",
        300,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        report = _roost(
            "eval",
            "alfworld",
            "--agent",
            "expert",
            "--env-url",
            url,
            "--episodes",
            "3",
            "--split",
            "valid_unseen",
            "--json",
            "--no-progress",
        )
    finally:
        stop_process(server, timeout_s=30)
    assert (report["success_rate"], report["mean_reward"], report["episodes"]) == (1.0, 1.0, 3)


def test_eval_alone_runs_the_env_on_the_made_fixtures(tmp_path: Path):
    env = {**os.environ, "ROOST_HOME": str(tmp_path), "ALFWORLD_DATA": str(tmp_path / "no-alfworld-data")}
    made = subprocess.run(
        [
            *ROOST,
            "envs",
            "alfworld",
            "make-fixtures",
            "--train",
            "2",
            "--valid-seen",
            "0",
            "--valid-unseen",
            "0",
            "--receptacles",
            "4",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert made.returncode == 0 and made.stdout.strip() == str(tmp_path / "alfworld"), made.stderr
    report = _roost("eval", "alfworld", "--agent", "expert", "--episodes", "2", "--json", "--no-progress", env=env)
    assert (report["success_rate"], report["scored"], report["split"]) == (1.0, 2, "train")


def test_eval_help_lists_every_agent_it_accepts():
    from roost.agents.registry import AGENTS

    done = subprocess.run(
        [*ROOST, "eval", "--help"], capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "300"}
    )
    assert done.returncode == 0, done.stderr
    listed = done.stdout.split("Agent: ", 1)[1].split(".", 1)[0].split(", ")
    assert listed == [*AGENTS, "or module:Class"]
    assert set(AGENTS) >= {"tool", "expert", "mini-swe-agent", "command", "hermes", "planner-executor"}


def test_run_plays_each_task_once_with_the_command_and_its_reward_file():
    write = "import json, os; json.dump({'reward': 0.5}, open(os.environ['ROOST_REWARD_FILE'], 'w')); print('bye')"
    results = _roost(
        "run",
        "--command",
        f'{sys.executable} -c "{write}"',
        "--env",
        "roost.tests.agents.faulty_envs:make_factory",
        "--split",
        "train",
        "--no-submit",
        "--json",
    )
    assert [
        (r["task_id"], r["status"], r["reward"], r["reward_source"], r["exit_code"], r["output_tail"]) for r in results
    ] == [("t0", "ok", 0.5, "file", 0, "bye\n"), ("t1", "ok", 0.5, "file", 0, "bye\n")]


def test_what_env_code_prints_stays_out_of_the_json():
    """The toy env prints on its stdout at every reset (as OSWorld's getters do); `--json` output
    still parses, and the print lands on stderr."""
    done = subprocess.run(
        [
            *ROOST,
            "run",
            "--command",
            "true",
            "--env",
            "roost.tests.envs.toy_envs:make_factory",
            "--split",
            "train",
            "--episodes",
            "1",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert [r["task_id"] for r in json.loads(done.stdout)] == ["count-0"]
    assert "the toy env prints on its stdout" in done.stderr
