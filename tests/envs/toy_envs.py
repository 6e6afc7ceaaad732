"""A tiny env for server tests that need an env to misbehave on purpose.

Loaded by entry point (`roost.tests.envs.toy_envs:make_factory`), in the server's worker processes
as well: `roost.tests` is wherever `roost` is.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from roost.envs.errors import InvalidActionError
from roost.envs.protocol import EnvInfo, Observation, Reset, Step, Task, TextAction

COMMANDS = ("inc", "crash", "boom", "hang")
COMMAND = {"type": "object", "properties": {"command": {"type": "string"}}}
TOOLS = [{"type": "function", "function": {"name": "act", "description": ", ".join(COMMANDS), "parameters": COMMAND}}]


class CounterEnv:
    """Count to `target` with `inc`; `crash` kills the worker process, `boom` raises, `hang` hangs.
    Its reset prints a line on stdout and says which worker process hosts it (`info["pid"]`); with `closed_dir`, `close`
    leaves a file there named for its task."""

    def __init__(self, target: int, closed_dir: str | None = None) -> None:
        self.target = target
        self.closed_dir = closed_dir
        self.task_id = ""
        self.n = 0

    @property
    def info(self) -> EnvInfo:
        return EnvInfo("counter", "0", TOOLS, ("train",))

    async def tasks(self, split: str) -> list[Task]:
        return [Task(f"count-{i}", split) for i in range(3)]

    async def reset(self, *, task_id=None, seed=None, split=None, options=None) -> Reset:
        self.n = 0
        self.task_id = task_id or "count-0"
        print("the toy env prints on its stdout")  # as OSWorld's getters do: must not reach a CLI's --json
        return Reset(
            self.task_id, Observation("n=0"), TOOLS, {"admissible_commands": list(COMMANDS), "pid": os.getpid()}
        )

    async def step(self, action) -> Step:
        command = action.text if isinstance(action, TextAction) else action.parsed_arguments().get("command")
        if command == "crash":
            os._exit(3)
        if command == "boom":
            raise RuntimeError("the toy env broke")
        if command == "hang":
            time.sleep(3600)
        if command != "inc":
            raise InvalidActionError(f"{command!r} is not one of {COMMANDS}")
        self.n += 1
        done = self.n >= self.target
        return Step(Observation(f"n={self.n}"), float(done), done, False, {"admissible_commands": list(COMMANDS)})

    async def close(self) -> None:
        if self.closed_dir is not None:
            Path(self.closed_dir, self.task_id).touch()


def make_factory(target: int = 3, load_s: float = 0.0, closed_dir: str | None = None):
    """`load_s`: how long each worker takes to load the env."""
    time.sleep(load_s)
    return lambda: CounterEnv(target, closed_dir)
