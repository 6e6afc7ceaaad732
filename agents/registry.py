"""Short agent names → their classes; anything else may be given as `module:Class`.

A class may also be a scripted player an env ships (`roost.agents.player`): it is played by
`PlayerAgent`.
"""

from __future__ import annotations

import importlib
from typing import Any

from roost.agents.player import Player, PlayerAgent
from roost.agents.protocol import Agent

AGENTS: dict[str, str] = {
    "tool": "roost.agents.tool_agent:ToolAgent",
    "expert": "roost.agents.expert:ExpertAgent",
    "mini-swe-agent": "roost.agents.mini_swe:MiniSweAgent",
    "command": "roost.agents.command:CommandAgent",
    "hermes": "roost.agents.hermes:HermesAgent",
    "observing-expert": "roost.envs.alfworld.observing_expert:ObservingExpert",
    "planner-executor": "roost.agents.planner_executor:PlannerExecutor",
}


def load_agent(name: str, **kwargs: Any) -> Agent:
    target = AGENTS.get(name, name)
    if ":" not in target:
        raise KeyError(
            f"unknown agent {name!r}; known agents: {', '.join(sorted(AGENTS))} (or give one as 'package.module:Class')"
        )
    module, _, attr = target.partition(":")
    made = getattr(importlib.import_module(module), attr)(**kwargs)
    return PlayerAgent(made) if isinstance(made, Player) and not hasattr(made, "run") else made
