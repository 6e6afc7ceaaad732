"""An env whose observations carry a screenshot (a PNG drawn per step), for agents that send
what they see (loaded by entry point)."""

from __future__ import annotations

import base64
import io

from roost.envs.protocol import EnvInfo, Observation, Reset, Step, Task


def screen(step: int) -> str:
    """A 4×4 PNG whose colour says the step, base64 (as `Observation.image` holds it)."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), (40 * step, 0, 0)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


class ScreenEnv:
    def __init__(self) -> None:
        self.steps = 0

    @property
    def info(self) -> EnvInfo:
        return EnvInfo("screen", "0", [], ("train",))

    async def tasks(self, split: str) -> list[Task]:
        return [Task("look", split)]

    async def reset(self, *, task_id=None, seed=None, split=None, options=None) -> Reset:
        self.steps = 0
        return Reset("look", Observation("Task: describe the screen", image=screen(0)), [])

    async def step(self, action) -> Step:
        self.steps += 1
        return Step(Observation(f"noted ({self.steps})", image=screen(self.steps)), 0.0, False, False)

    async def close(self) -> None:
        pass


def make_factory():
    return ScreenEnv
