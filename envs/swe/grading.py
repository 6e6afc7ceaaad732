"""The SWE reward: apply a patch in a fresh sandbox, run the tests, grade with `swebench`.

Patches go in the way swebench's harness applies them (its `GIT_APPLY_CMDS`, in order, from
a clean tree each time). The evaluation script has swebench's shape (markers around the test
output, the test command's exit status recorded after it) and the log is graded by swebench's
own `get_logs_eval`, `get_eval_tests_report` and `get_resolution_status`: resolved means every
FAIL_TO_PASS test passes and every PASS_TO_PASS test still passes.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from roost.sandboxes import Outcome, Sandbox, SandboxBackend

from .task import DEFAULT_TEST_CMD, SWETask
from .task_sandbox import start_task_sandbox

EVAL_OUTPUT_LIMIT = 16 << 20
LOG_TAIL = 4000


@dataclass(frozen=True)
class Verdict:
    """How a patch fared; `reward` is 1.0 exactly when it resolved the task."""

    resolved: bool
    status: str
    """swebench's RESOLVED_FULL / RESOLVED_PARTIAL / RESOLVED_NO, or why grading stopped:
    empty_patch, patch_failed, tests_timeout, tests_did_not_run."""
    patch_applied: bool
    report: dict[str, Any] = field(default_factory=dict)
    """swebench's tests report: FAIL_TO_PASS / PASS_TO_PASS → success / failure lists."""
    log_tail: str = ""
    duration_s: float = 0.0

    @property
    def reward(self) -> float:
        return 1.0 if self.resolved else 0.0

    def info(self) -> dict[str, Any]:
        return {
            "resolved": self.resolved,
            "status": self.status,
            "patch_applied": self.patch_applied,
            "tests": self.report,
            "eval_log_tail": self.log_tail,
            "eval_s": round(self.duration_s, 3),
        }


async def grade(
    backend: SandboxBackend, task: SWETask, patch: str, *, timeout_s: float = 1800.0, run_empty: bool = False
) -> Verdict:
    """Grade `patch` against `task` in a sandbox of its own. An empty patch scores 0 without a
    test run, unless `run_empty` (the do-nothing check runs the tests on the untouched tree)."""
    start = time.monotonic()
    if not patch.strip() and not run_empty:
        return Verdict(False, "empty_patch", False, log_tail="the patch is empty: nothing was changed")
    sandbox = await start_task_sandbox(backend, task)
    try:
        if not patch.strip():
            return await run_tests(sandbox, task, timeout_s, start)
        applied, log = await apply_patch(sandbox, patch)
        if not applied:
            return Verdict(False, "patch_failed", False, log_tail=log[-LOG_TAIL:], duration_s=time.monotonic() - start)
        return await run_tests(sandbox, task, timeout_s, start)
    finally:
        await sandbox.close()


async def apply_patch(sandbox: Sandbox, patch: str) -> tuple[bool, str]:
    """(applied, log): swebench's apply commands in order, resetting the tree between tries."""
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS

    path = f"{sandbox.scratch_dir}/roost-model.patch"
    await sandbox.write_file(path, patch if patch.endswith("\n") else patch + "\n")
    log = []
    for attempt, command in enumerate(GIT_APPLY_CMDS):
        if attempt:
            await sandbox.exec("git checkout -- . ; git clean -fdq", timeout_s=120)
        result = await sandbox.exec(f"{command} {shlex.quote(path)}", timeout_s=120)
        log.append(f"$ {command}\n{result.output}")
        if result.ok:
            return True, "\n".join(log)
    reverse = await sandbox.exec(f"git apply --check --reverse {shlex.quote(path)}", timeout_s=120)
    return reverse.ok, "\n".join(log)


async def run_tests(sandbox: Sandbox, task: SWETask, timeout_s: float, start: float) -> Verdict:
    from swebench.harness.constants import FAIL_TO_PASS, PASS_TO_PASS, TESTS_TIMEOUT, EvalType, ResolvedStatus
    from swebench.harness.grading import get_eval_tests_report, get_logs_eval, get_resolution_status

    spec = test_spec(task, sandbox.scratch_dir)
    if task.test_patch:
        await sandbox.write_file(f"{sandbox.scratch_dir}/roost-test.patch", task.test_patch)
    script = f"{sandbox.scratch_dir}/roost-eval.sh"
    await sandbox.write_file(script, spec.eval_script)
    result = await sandbox.exec(f"bash {script}", timeout_s=timeout_s, output_limit=EVAL_OUTPUT_LIMIT)
    log = result.output
    if result.outcome is Outcome.timeout:
        log += f"\n{TESTS_TIMEOUT}: the tests ran past {timeout_s:.0f}s\n"
    status_map, found = await asyncio.to_thread(_logs_eval, get_logs_eval, spec, log)
    duration = time.monotonic() - start
    if not found:
        status = "tests_timeout" if result.outcome is Outcome.timeout else "tests_did_not_run"
        return Verdict(False, status, True, log_tail=log[-LOG_TAIL:], duration_s=duration)
    report = get_eval_tests_report(
        status_map,
        {FAIL_TO_PASS: spec.FAIL_TO_PASS, PASS_TO_PASS: spec.PASS_TO_PASS},
        eval_type=EvalType(spec.eval_type),
    )
    status = get_resolution_status(report)
    return Verdict(status == ResolvedStatus.FULL.value, status, True, report, log[-LOG_TAIL:], duration)


def test_spec(task: SWETask, scratch_dir: str):
    """swebench's TestSpec for `task`: its own eval script, or one built from test_patch + test_cmd."""
    from swebench.harness.utils import parse_eval_script, record_test_exit_code
    from swebench.types import TestSpec

    lines = parse_eval_script(task.eval_script) if task.eval_script else _eval_lines(task, scratch_dir)
    return TestSpec(
        instance_id=task.instance_id,
        image=task.image or "",
        eval_script_list=record_test_exit_code(lines),
        repo=task.repo,
        version=task.version,
        FAIL_TO_PASS=task.FAIL_TO_PASS,
        PASS_TO_PASS=task.PASS_TO_PASS,
        log_parser=task.parser_name,
        eval_type=task.eval_type,
    )


def _eval_lines(task: SWETask, scratch_dir: str) -> list[str]:
    from swebench.harness.constants import APPLY_PATCH_FAIL, END_TEST_OUTPUT, START_TEST_OUTPUT

    files = " ".join(shlex.quote(f) for f in task.test_files())
    reset = f"git -c safe.directory='*' checkout {shlex.quote(task.base_commit)} -- {files}" if files else ":"
    test_cmd = task.test_cmd or f"{DEFAULT_TEST_CMD} {files}".strip()
    lines = [f"cd {shlex.quote(task.workdir)}", reset]
    if task.test_patch:
        lines.append(
            f"git apply -v {scratch_dir}/roost-test.patch || {{ echo '{APPLY_PATCH_FAIL} (test patch)'; exit 1; }}"
        )
    # ':' lines, as in swebench's scripts: under `set -x` each marker appears exactly once.
    return [*lines, f": '{START_TEST_OUTPUT}'", test_cmd, f": '{END_TEST_OUTPUT}'", reset]


def _logs_eval(get_logs_eval, spec, log: str) -> tuple[dict[str, str], bool]:
    # swebench reads the log from a file.
    fd, path = tempfile.mkstemp(prefix="roost-swe-eval-", suffix=".log")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(log)
        return get_logs_eval(spec, path)
    finally:
        os.unlink(path)
