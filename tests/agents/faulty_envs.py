"""An env that dies on its second step, for the runner's fault labelling (loaded by entry point)."""

from __future__ import annotations

import os

from roost.envs.protocol import EnvInfo, Observation, Reset, Step, Task

TOOLS = [{"type": "function", "function": {"name": "act", "parameters": {"type": "object", "properties": {}}}}]


class DyingEnv:
    def __init__(self) -> None:
        self.steps = 0

    @property
    def info(self) -> EnvInfo:
        return EnvInfo("dying", "0", TOOLS, ("train",))

    async def tasks(self, split: str) -> list[Task]:
        return [Task("t0", split), Task("t1", split)]

    async def reset(self, *, task_id=None, seed=None, split=None, options=None) -> Reset:
        self.steps = 0
        return Reset(task_id or "t0", Observation("go"), TOOLS, {"expert_plan": ["step", "step", "step"]})

    async def step(self, action) -> Step:
        self.steps += 1
        if self.steps == 2:
            os._exit(5)
        return Step(Observation("ok"), 0.0, False, False, {"expert_plan": ["step", "step"]})

    async def close(self) -> None:
        pass


def make_factory():
    return DyingEnv
