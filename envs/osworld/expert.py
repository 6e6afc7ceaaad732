"""The scripted expert for roost's OSWorld fixture tasks.

Each fixture task carries its solution in an extra field of its JSON, `"expert"`: a list
of steps `{"when": CONDITION | null, "do": ACTION}`. ACTION is what an agent may send:
pyautogui code, or `DONE` / `FAIL`. CONDITION is checked against the accessibility tree
(OSWorld's XML) of the latest observation; until it holds, the expert answers `WAIT`,
so it waits by polling observations rather than by blind sleeps. Conditions:

    {"role": "table", "name": "Sheet Sheet1", "focused": true}   a node like this exists
    {"text": "roost-ok-1"}                                        a node's text contains it
    {"absent": {...}}                                             no node matches the inner one

`role` compares OSWorld's tag (a role with spaces as dashes) exactly, `name` and `text` as
substrings, `focused` the node's `focused` state. Used through
`reset(options={"expert_plan": True})`: the env asks `ExpertPlanner.next_action` after
every step and puts the answer in `info["expert_plan"]`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

WAIT = "WAIT"
EXPERT_FIELD = "expert"


class NoExpertSolution(ValueError):
    """The task has no `expert` field, so the scripted expert cannot play it."""


@dataclass(frozen=True)
class ExpertStep:
    when: dict[str, Any] | None
    do: str


def expert_steps(task: dict[str, Any]) -> list[ExpertStep]:
    """The task's scripted solution, checked for shape."""
    raw = task.get(EXPERT_FIELD)
    if not raw:
        raise NoExpertSolution(
            f"task {task.get('id')!r} has no {EXPERT_FIELD!r} solution; the scripted "
            "expert plays only tasks written by `roost envs osworld make-fixtures`"
        )
    steps = []
    for i, step in enumerate(raw):
        if not isinstance(step, dict) or not isinstance(step.get("do"), str):
            raise NoExpertSolution(
                f"task {task.get('id')!r}: expert step {i} must be "
                f"{{'when': condition or null, 'do': action text}}, got {step!r:.200}"
            )
        steps.append(ExpertStep(when=step.get("when"), do=step["do"]))
    return steps


def _local(name: str) -> str:
    return name.rsplit("}", 1)[-1]


def _node_matches(node: ET.Element, cond: dict[str, Any]) -> bool:
    attrs = {_local(k): v for k, v in node.attrib.items()}
    if "role" in cond and _local(node.tag).replace("-", " ") != cond["role"].replace("-", " "):
        return False
    if "name" in cond and cond["name"] not in attrs.get("name", ""):
        return False
    if "text" in cond and cond["text"] not in (node.text or ""):
        return False
    if "focused" in cond and (attrs.get("focused") == "true") != bool(cond["focused"]):
        return False
    return True


def tree_holds(tree_xml: str | None, cond: dict[str, Any] | None) -> bool:
    """Whether `cond` holds on the accessibility tree (no condition always holds)."""
    if cond is None:
        return True
    if not tree_xml:
        return False
    try:
        root = ET.fromstring(tree_xml)
    except ET.ParseError:
        return False
    if "absent" in cond:
        return not any(_node_matches(n, cond["absent"]) for n in root.iter())
    return any(_node_matches(n, cond) for n in root.iter())


class ExpertPlanner:
    """Walks a task's scripted steps, answering WAIT while a step's condition does not hold."""

    def __init__(self, task: dict[str, Any]) -> None:
        self.steps = expert_steps(task)
        self._next = 0

    def next_action(self, tree_xml: str | None) -> str:
        if self._next >= len(self.steps):
            return "DONE"
        step = self.steps[self._next]
        if not tree_holds(tree_xml, step.when):
            return WAIT
        self._next += 1
        return step.do
