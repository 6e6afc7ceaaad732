"""Every server command logs through Python logging to stderr: INFO lines by default, as text or,
with --log-json, one JSON object per line. Each test starts the real command as a subprocess."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from roost.lifetime import die_with_parent, stop_process
from roost.serving.handle import is_healthy

TOY = "roost.tests.envs.toy_envs:make_factory"
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (?P<level>[A-Z]+) (?P<logger>[\w.]+): (?P<message>.*)$")


def stderr_until(args: list[str], done: Callable[[list[str]], bool], log: Path) -> list[str]:
    """Run `roost ARGS` until `done(its stderr lines so far)`; its stderr lines up to then."""
    with log.open("w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "roost.cli.main", *args],
            stdout=subprocess.DEVNULL,
            stderr=err,
            preexec_fn=die_with_parent(),
        )
    try:
        deadline = time.monotonic() + 120
        while not done(log.read_text().splitlines()):
            assert process.poll() is None, f"roost {args[0]} exited {process.returncode}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"roost {args[0]} printed no such line:\n{log.read_text()[-3000:]}"
            time.sleep(0.1)
    finally:
        stop_process(process)
    return log.read_text().splitlines()


def started(lines: list[str]) -> bool:
    return any("Application startup complete." in line for line in lines)


def text_records(lines: list[str]) -> list[dict[str, str]]:
    return [m.groupdict() for m in map(TEXT_LINE.match, lines) if m]


def json_records(lines: list[str]) -> list[dict]:
    return [json.loads(line) for line in lines if line.startswith("{")]


def test_the_env_server_logs_info_lines_as_text_by_default(tmp_path):
    lines = stderr_until(["serve", TOY, "--workers", "1", "--port", "0"], started, tmp_path / "stderr.log")
    records = text_records(lines)
    ours = [r for r in records if r["logger"] == "roost.envs.serve"]
    assert ours and ours[0]["level"] == "INFO" and ours[0]["message"].startswith(f"env server for {TOY}")
    assert {"level": "INFO", "logger": "uvicorn.error", "message": "Application startup complete."} in records


def test_the_env_server_logs_json_lines_with_their_extra_fields(tmp_path):
    lines = stderr_until(
        ["serve", TOY, "--workers", "1", "--port", "0", "--log-json"], started, tmp_path / "stderr.log"
    )
    records = json_records(lines)
    [ours] = [r for r in records if r["logger"] == "roost.envs.serve"]
    assert (ours["level"], ours["env"], ours["workers"]) == ("INFO", TOY, 1)
    assert ours["message"].startswith(f"env server for {TOY}") and datetime.fromisoformat(ours["time"])
    assert any(r["message"] == "Application startup complete." for r in records)
    assert not text_records(lines)  # nothing printed as text besides


def test_the_gateway_logs_json_when_asked(tmp_path):
    # the openai backend starts without reaching its upstream
    args = [
        "gateway",
        "--backend",
        "openai",
        "--engine-url",
        "http://127.0.0.1:9/v1",
        "--port",
        "0",
        "--store",
        str(tmp_path / "t.sqlite"),
        "--log-json",
    ]
    lines = stderr_until(args, started, tmp_path / "stderr.log")
    [ours] = [r for r in json_records(lines) if r["logger"] == "roost.gateway"]
    assert ours["level"] == "INFO" and (ours["backend"], ours["store"]) == ("openai", str(tmp_path / "t.sqlite"))


def test_the_viewer_logs_json_when_asked(tmp_path):
    lines = stderr_until(["view", str(tmp_path), "--port", "0", "--log-json"], started, tmp_path / "stderr.log")
    assert {"level": "INFO", "logger": "uvicorn.error"} in [
        {k: r[k] for k in ("level", "logger")} for r in json_records(lines)
    ]


def test_below_its_log_level_a_server_prints_nothing(tmp_path):
    port_file = tmp_path / "port"

    def serving(_: list[str]) -> bool:
        return port_file.is_file() and is_healthy(f"http://127.0.0.1:{port_file.read_text().strip()}")

    lines = stderr_until(
        ["serve", TOY, "--workers", "1", "--port", "0", "--port-file", str(port_file), "--log-level", "warning"],
        serving,
        tmp_path / "stderr.log",
    )
    assert not text_records(lines)


def test_the_engine_logs_what_it_serves(tmp_path):
    lines = stderr_until(["engine", "--model", "tiny", "--port", "0"], started, tmp_path / "stderr.log")
    ours = [r for r in text_records(lines) if r["logger"] == "roost.rollout.engine.launch"]
    assert ours and ours[0]["level"] == "INFO" and ours[0]["message"].startswith("engine serving ")
