"""What the conformance rules share: the check's config, and one env under trial."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from roost.envs.protocol import Action, Env, EnvFactory, Reset, Step, Task, TextAction


@dataclass(frozen=True)
class CheckConfig:
    """How to check one env cheaply; each env folder ships its own (`EnvSpec.check`)."""

    env_args: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the env's entry point (a small data set, a light sandbox)."""
    split: str | None = None
    """The split to take the task from; None: the env's first split."""
    task_id: str | None = None
    """The task every episode of the check plays; None: the split's first task."""
    probe: Action | None = None
    """An action the env accepts right after reset: the rules compare what it returns to tell
    whether a reset started fresh and whether a refused action left the episode unchanged.
    None: those comparisons are skipped."""
    finish: tuple[Action, ...] = ()
    """Actions that end an episode from reset (terminated or truncated), for the rule on steps
    after the end."""
    finish_by_expert_plan: bool = False
    """End the episode by following `info["expert_plan"]` (reset option `expert_plan`) instead."""
    max_finish_steps: int = 50
    rule_timeout_s: float = 300.0
    """A rule whose env calls take longer fails (a hung env must not hang the check)."""


class RuleFailed(Exception):
    """The env breaks the rule; the message says how and what to change."""


class RuleSkipped(Exception):
    """The rule cannot run here (no probe action configured, an earlier rule failed)."""


@dataclass
class Trial:
    """One env under check, with the task its episodes play and every `info` it returned."""

    factory: EnvFactory
    env: Env
    config: CheckConfig
    split: str = ""
    task: Task | None = None
    infos: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """(which call, its info) for each reset and step of the check."""
    baseline: tuple[Any, ...] | None = None
    """What the probe returned right after a fresh reset."""
    processes_before: set[int] = field(default_factory=set)
    """Descendants of this process before the env was made (the factory's own are not the env's)."""

    def need_task(self) -> Task:
        if self.task is None:
            raise RuleSkipped("needs a task (tasks_are_listed did not pass)")
        return self.task

    def need_probe(self) -> Action:
        if self.config.probe is None:
            raise RuleSkipped("no probe action configured (CheckConfig.probe, `roost envs check --probe-text`)")
        return self.config.probe

    async def reset(self, **options: Any) -> Reset:
        task = self.need_task()
        reset = await self.env.reset(task_id=task.id, split=self.split, options=options or None)
        if isinstance(reset, Reset):
            self.infos.append(("reset", reset.info))
        return reset

    async def step(self, action: Action) -> Step:
        step = await self.env.step(action)
        if isinstance(step, Step):
            self.infos.append((f"step {show(action)}", step.info))
        return step


def show(action: Action) -> str:
    """An action as a message names it: `look`, `bash({"command": "ls"})`."""
    if isinstance(action, TextAction):
        return repr(action.text[:60])
    arguments = action.arguments if isinstance(action.arguments, str) else json.dumps(action.arguments)
    return f"{action.name}({arguments[:60]})"


def outcome_of(step: Step) -> tuple[Any, ...]:
    """What two steps from the same state must agree on (not images: a cursor may blink)."""
    return step.observation.text, step.reward, step.terminated, step.truncated
