"""Short agent names → their classes; anything else may be given as `module:Class`."""

from __future__ import annotations

import importlib
from typing import Any

from roost.agents.protocol import Agent

AGENTS: dict[str, str] = {
    "tool": "roost.agents.tool_agent:ToolAgent",
    "expert": "roost.agents.expert:ExpertAgent",
    "mini-swe-agent": "roost.agents.mini_swe:MiniSweAgent",
    "command": "roost.agents.command:CommandAgent",
    "hermes": "roost.agents.hermes:HermesAgent",
    "observing-expert": "roost.agents.observing_expert:ObservingExpert",
    "planner-executor": "roost.agents.planner_executor:PlannerExecutor",
}


def load_agent(name: str, **kwargs: Any) -> Agent:
    target = AGENTS.get(name, name)
    if ":" not in target:
        raise KeyError(f"unknown agent {name!r}; known agents: {', '.join(sorted(AGENTS))} "
                       "(or give one as 'package.module:Class')")
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)(**kwargs)
