"""The shapes the protocol's records must have: a `Reset`, a `Step`, an `Observation`."""

from __future__ import annotations

import math
from typing import Any

from roost.envs.conformance.tool_schemas import tool_problems
from roost.envs.conformance.trial import RuleFailed
from roost.envs.protocol import Observation, Reset, Step


def check_reset(reset: Any, task_id: str | None) -> None:
    if not isinstance(reset, Reset):
        raise RuleFailed(f"reset must return a roost.envs.protocol.Reset, got {type(reset).__name__}")
    if task_id is not None and reset.task_id != task_id:
        raise RuleFailed(f"reset(task_id={task_id!r}) started {reset.task_id!r}")
    check_observation(reset.observation, "reset")
    if problems := tool_problems(reset.tools):
        raise RuleFailed(f"the tools of reset: {'; '.join(problems)}")
    if not isinstance(reset.info, dict):
        raise RuleFailed(f"reset's info must be a dict, got {type(reset.info).__name__}")


def check_step(step: Any) -> None:
    if not isinstance(step, Step):
        raise RuleFailed(f"step must return a roost.envs.protocol.Step, got {type(step).__name__}")
    check_observation(step.observation, "step")
    if isinstance(step.reward, bool) or not isinstance(step.reward, (int, float)) or not math.isfinite(step.reward):
        raise RuleFailed(f"a step's reward must be a finite number, got {step.reward!r}")
    if not (isinstance(step.terminated, bool) and isinstance(step.truncated, bool)):
        raise RuleFailed(f"terminated and truncated must be bools, got {step.terminated!r}, {step.truncated!r}")
    if step.tools is not None and (problems := tool_problems(step.tools)):
        raise RuleFailed(f"the tools of a step: {'; '.join(problems)}")


def check_observation(observation: Any, where: str) -> None:
    if not isinstance(observation, Observation) or not isinstance(observation.text, str):
        raise RuleFailed(f"{where} must carry a roost.envs.protocol.Observation with text, got {observation!r:.120}")
    for name in ("image", "accessibility_tree"):
        if getattr(observation, name) is not None and not isinstance(getattr(observation, name), str):
            raise RuleFailed(f"the observation's {name} of {where} must be a string or None")
