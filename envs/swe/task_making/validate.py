"""A project's own tests, run before and after a bug; statuses read by swebench's pytest parser.

The command disables pytest's plugin autoload and clears the project's `addopts` (coverage
flags and the like), so a project's tests need only pytest; it is also the task's `test_cmd`,
so task making and grading read the same test names.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .projects import Project

PYTEST = "python -m pytest --no-header -rA -p no:cacheprovider -o addopts= -o console_output_style=classic"


@dataclass
class TestRun:
    statuses: dict[str, str] = field(default_factory=dict)
    """Test name → PASSED / FAILED / ERROR / SKIPPED / XFAIL (names printed twice left out)."""
    output: str = ""
    timed_out: bool = False
    duration_s: float = 0.0

    def passed(self) -> set[str]:
        return {name for name, status in self.statuses.items() if status in ("PASSED", "XFAIL")}


def test_cmd(project: Project, tb: str = "no") -> str:
    ignores = "".join(f" --ignore={shlex.quote(path)}" for path in project.ignore)
    ignores += "".join(f" --deselect={shlex.quote(test)}" for test in project.deselect)
    tests = " ".join(shlex.quote(path) for path in project.tests)
    env = "".join(f"{name}={shlex.quote(value)} " for name, value in project.env)
    # COLUMNS: pytest cuts its `-rA` summary lines (`PASSED name`, `FAILED name - message`) to the
    # terminal's width (80 without one): long parametrised ids and the problem statements'
    # assertion messages came out cut, and the grader then missed tests task making had named.
    # PYTHONHASHSEED: set order the same in task making and grading.
    return (
        f"COLUMNS=1000 PYTHONHASHSEED=0 {env}PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONPATH={shlex.quote(project.pythonpath)} "
        f"{PYTEST} --tb={tb}{ignores} {tests}"
    )


def run_tests(repo: str, project: Project, timeout_s: float) -> TestRun:
    """The project's tests in `repo` (short tracebacks, for the problem statement)."""
    from swebench.harness.log_parsers.python import parse_log_pytest

    start = time.monotonic()
    # The `python` the grader's host-Python sandboxes put first (task_sandbox.with_host_python):
    # test ids depend on pytest's version (9.0 and 9.2 name a long parametrised id differently),
    # so the names task making records must come from the pytest that grades them.
    path = f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    with subprocess.Popen(
        ["bash", "-c", test_cmd(project, tb="short")],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    ) as process:
        try:
            output, _ = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            # The whole group: pytest outlives the shell that started it otherwise.
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            return TestRun(output=output, timed_out=True, duration_s=time.monotonic() - start)
    statuses = parse_log_pytest(output, None)
    # swebench's parser cuts names at whitespace: names it sees twice are ambiguous, so unused.
    counts = Counter(line.split()[1] for line in output.splitlines() if _is_status_line(line, statuses))
    unique = {name: status for name, status in statuses.items() if counts[name] == 1}
    return TestRun(unique, output, False, time.monotonic() - start)


def _is_status_line(line: str, statuses: dict[str, str]) -> bool:
    parts = line.replace(" - ", " ").split()
    return len(parts) > 1 and parts[0] in {"PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL"} and parts[1] in statuses
