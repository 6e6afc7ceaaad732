"""Run a task's verifier in the episode's sandbox and turn its result into a reward.

A verifier that cannot run (the sandbox fails, it times out) is an environment fault, not a
reward of 0: the runner then marks the episode `infra_error`. A verifier that runs and rejects
the agent's work (non-zero exit, no match, not a number) is a reward of 0.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

from roost.envs.errors import EnvFaultError
from roost.sandboxes import Outcome, Sandbox, SandboxError

from .task import HermesTask

OUTPUT_CHARS = 4000


@dataclass(frozen=True)
class Verdict:
    reward: float
    exit_code: int | None
    output: str
    reason: str
    """Why this reward, in a few words (shown to people, kept in the step's info)."""

    def info(self) -> dict:
        return asdict(self)


async def verify(sandbox: Sandbox, task: HermesTask) -> Verdict:
    verifier = task.verifier
    try:
        for path, text in task.verifier_files.items():
            await sandbox.write_file(path, text)
        result = await sandbox.exec(verifier.command, timeout_s=verifier.timeout_s)
    except SandboxError as exc:
        raise EnvFaultError(f"the verifier of task {task.id} could not run in its sandbox: {exc}") from exc
    if result.outcome is not Outcome.exited:
        raise EnvFaultError(
            f"the verifier of task {task.id} did not finish ({result.outcome.value} after "
            f"{result.duration_s:.0f}s); raise verifier.timeout_s or fix the command"
        )
    output = result.output[-OUTPUT_CHARS:]
    reward, reason = _score(verifier.reward, verifier.pattern, result.exit_code, output)
    return Verdict(reward, result.exit_code, output, reason)


def _score(mode: str, pattern: str | None, exit_code: int | None, output: str) -> tuple[float, str]:
    if mode == "exit_code":
        return (1.0, "verifier exited 0") if exit_code == 0 else (0.0, f"verifier exited {exit_code}")
    if exit_code != 0:
        return 0.0, f"verifier exited {exit_code}"
    if mode == "output_match":
        found = re.search(pattern or "", output)
        return (1.0, "output matched") if found else (0.0, f"output did not match {pattern!r}")
    lines = output.strip().splitlines()
    try:
        value = float(lines[-1]) if lines else math.nan
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:
        return 0.0, "the verifier's last line is not a number in [0, 1]"
    return value, f"verifier scored {value:g}"
