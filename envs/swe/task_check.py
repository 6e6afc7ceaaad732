"""Gold and do-nothing over a task set: every task's reference patch and an empty patch,
graded by the env's own grader. A usable task set resolves (nearly) every gold patch and
none of the empty ones; `roost envs swe check-tasks` reports both fractions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from roost.sandboxes import SandboxBackend
from roost.sandboxes.errors import SandboxError

from .grading import Verdict, grade
from .task import SWETask


@dataclass(frozen=True)
class TaskCheck:
    """How one task's gold and empty patches graded."""

    instance_id: str
    gold: str
    """The gold patch's status (RESOLVED_FULL when it solves the task), or why it could not grade."""
    empty: str
    gold_resolved: bool
    empty_resolved: bool


@dataclass
class TaskSetReport:
    checks: list[TaskCheck] = field(default_factory=list)

    @property
    def gold_solved(self) -> float:
        return sum(c.gold_resolved for c in self.checks) / len(self.checks) if self.checks else 0.0

    @property
    def empty_solved(self) -> float:
        return sum(c.empty_resolved for c in self.checks) / len(self.checks) if self.checks else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "tasks": len(self.checks),
            "gold_solved": round(self.gold_solved, 4),
            "empty_solved": round(self.empty_solved, 4),
            "gold_failures": {c.instance_id: c.gold for c in self.checks if not c.gold_resolved},
            "empty_resolved": [c.instance_id for c in self.checks if c.empty_resolved],
        }


async def check_task(backend: SandboxBackend, task: SWETask, timeout_s: float) -> TaskCheck:
    gold = await _grade(backend, task, task.patch, timeout_s) if task.patch.strip() else None
    # An empty patch grades through the whole test run, not grade()'s empty-patch shortcut:
    # a task whose tests already pass at base_commit must show up here.
    empty = await _grade(backend, task, "", timeout_s, run_empty=True)
    return TaskCheck(
        instance_id=task.instance_id,
        gold=gold.status if gold else "no_gold_patch",
        empty=empty.status,
        gold_resolved=bool(gold and gold.resolved),
        empty_resolved=empty.resolved,
    )


async def check_tasks(
    backend: SandboxBackend,
    tasks: list[SWETask],
    *,
    concurrency: int = 4,
    timeout_s: float = 1800.0,
    on_done: Callable[[TaskCheck], None] | None = None,
) -> TaskSetReport:
    """Grade every task's gold and empty patch, `concurrency` tasks at a time."""
    slots = asyncio.Semaphore(concurrency)
    report = TaskSetReport()

    async def one(task: SWETask) -> TaskCheck:
        async with slots:
            check = await check_task(backend, task, timeout_s)
        if on_done is not None:
            on_done(check)
        return check

    report.checks = list(await asyncio.gather(*(one(t) for t in tasks)))
    return report


async def _grade(
    backend: SandboxBackend, task: SWETask, patch: str, timeout_s: float, run_empty: bool = False
) -> Verdict:
    try:
        return await grade(backend, task, patch, timeout_s=timeout_s, run_empty=run_empty)
    except SandboxError as exc:  # a task whose sandbox cannot start grades as failed, with why
        return Verdict(False, f"sandbox_error: {exc}", False)
