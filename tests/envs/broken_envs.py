"""A small env that keeps every rule of the env protocol, and variants that each break one.

Loaded by entry point as well (`roost envs check roost.tests.envs.broken_envs:make_factory
--env-arg kind=sloppy_refusals --probe-text peek`). Commands: `peek` (shows the count, changes
nothing), `inc` (counts one; at 3 the episode terminates).
"""

from __future__ import annotations

import math
import subprocess
from dataclasses import replace

from roost.envs.errors import EpisodeFinishedError, InvalidActionError, UnknownTaskError
from roost.envs.protocol import EnvInfo, Observation, Reset, Step, Task, TextAction

COMMANDS = ("peek", "inc")
TARGET = 3
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "act",
            "description": "One of: peek, inc.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    }
]
TASKS = ("count-0", "count-1")


class KeptEnv:
    """Counts to 3; every rule of `roost.envs.conformance` holds."""

    info_keys = frozenset({"n", "admissible_commands"})

    def __init__(self) -> None:
        self.n, self.task_id, self.running, self.resets = 0, "", False, 0

    @property
    def info(self) -> EnvInfo:
        return EnvInfo("counter", "1", TOOLS, ("train",))

    async def tasks(self, split: str) -> list[Task]:
        return [Task(t, split) for t in TASKS] if split == "train" else []

    async def reset(self, *, task_id=None, seed=None, split=None, options=None) -> Reset:
        self.task_id = self.choose(task_id, seed)
        self.n, self.running, self.resets = 0, True, self.resets + 1
        return Reset(self.task_id, Observation(self.first_text()), TOOLS, self.state())

    def choose(self, task_id: str | None, seed: int | None) -> str:
        if task_id is None:
            return TASKS[(seed or 0) % len(TASKS)]
        if task_id not in TASKS:
            raise UnknownTaskError(f"no task {task_id!r}")
        return task_id

    def first_text(self) -> str:
        return f"{self.task_id}: count to {TARGET}"

    async def step(self, action) -> Step:
        if not self.running:
            raise EpisodeFinishedError("no episode is running; call reset first")
        command = self.command(action)
        if command == "inc":
            self.n += 1
        self.running = self.n < TARGET
        return Step(Observation(f"n={self.n}"), float(self.n >= TARGET), self.n >= TARGET, False, self.state())

    def command(self, action) -> str:
        if isinstance(action, TextAction):
            command = action.text
        elif action.name != "act":
            raise InvalidActionError(f"unknown tool {action.name!r}")
        else:
            command = action.parsed_arguments().get("command")
        if command not in COMMANDS:
            raise InvalidActionError(f"{command!r} is not one of {COMMANDS}")
        return command

    def state(self) -> dict:
        return {"n": self.n, "admissible_commands": list(COMMANDS)}

    async def close(self) -> None:
        self.running = False


class SloppyRefusals(KeptEnv):
    """Counts an action before checking it: a refused action still changes the episode."""

    def command(self, action) -> str:
        self.n += 1
        command = super().command(action)
        self.n -= 1
        return command


class UndeclaredInfo(KeptEnv):
    async def step(self, action) -> Step:
        step = await super().step(action)
        return replace(step, info={**step.info, "debug": True})


class BadToolSchema(KeptEnv):
    @property
    def info(self) -> EnvInfo:
        return EnvInfo(
            "counter", "1", [{"type": "function", "function": {"name": "act now", "parameters": {}}}], ("train",)
        )


class StickyReset(KeptEnv):
    """Its first observation remembers earlier episodes."""

    def first_text(self) -> str:
        return f"{self.task_id}: count to {TARGET} (episode {self.resets})"


class EndlessEnv(KeptEnv):
    """Accepts steps after the episode ended."""

    async def step(self, action) -> Step:
        self.running = self.running or bool(self.task_id)
        return await super().step(action)


class UnknownTaskAccepted(KeptEnv):
    def choose(self, task_id: str | None, seed: int | None) -> str:
        return task_id if task_id in TASKS else TASKS[0]


class BadReward(KeptEnv):
    async def step(self, action) -> Step:
        step = await super().step(action)
        return replace(step, reward=math.nan) if self.command(action) == "peek" else step


class StepWithoutEpisode(KeptEnv):
    """Steps a default episode when none was reset."""

    async def step(self, action) -> Step:
        self.running = self.running or not self.task_id
        return await super().step(action)


class LeakyEnv(KeptEnv):
    """Starts a helper process at its first reset and never stops it."""

    helpers: list[subprocess.Popen] = []

    async def reset(self, **kwargs) -> Reset:
        if self.resets == 0:
            LeakyEnv.helpers.append(subprocess.Popen(["sleep", "60"]))
        return await super().reset(**kwargs)


BROKEN = {
    "sloppy_refusals": (SloppyRefusals, "refusals_leave_the_episode_unchanged"),
    "undeclared_info": (UndeclaredInfo, "info_keys_are_declared"),
    "bad_tool_schema": (BadToolSchema, "tools_are_openai_functions"),
    "sticky_reset": (StickyReset, "reset_again_starts_fresh"),
    "endless": (EndlessEnv, "finished_episodes_refuse_steps"),
    "unknown_task_accepted": (UnknownTaskAccepted, "unknown_tasks_are_refused"),
    "bad_reward": (BadReward, "steps_return_a_step"),
    "step_without_episode": (StepWithoutEpisode, "steps_without_an_episode_are_refused"),
    "leaky": (LeakyEnv, "close_frees_the_env"),
}
"""kind → (the env, the one rule it breaks)."""


def make_factory(kind: str = "kept"):
    env = KeptEnv if kind == "kept" else BROKEN[kind][0]
    return env
