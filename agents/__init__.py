"""roost.agents: harnesses that act in envs, and the episode runner.

- `protocol`: what a harness is given (`EpisodeContext`) and returns.
- `runner`: task → gateway session → env episode → harness → reward → finish.
- `results`: how an episode ended (`EpisodeResult`; its status and outcome are `roost.outcome`'s).
- `tool_agent`: the built-in tool-calling agent (official `openai` client).
- `expert`: follows the env's own plan (ALFWorld: the PDDL planner).
- `command`: any command as the harness (`roost run --command`).
- `evaluate`, `cli`: `roost eval` and `roost run` (eval with the command harness).

Where it sits in the data flow: docs/architecture.md.
"""
