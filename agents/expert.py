"""The expert: follows the plan the env's own planner gives (`info["expert_plan"]`).

For ALFWorld the plan comes from fast-downward on the game's PDDL, recomputed after
every step, so the expert solves every solvable game. It needs no model, and plays
through the same runner as any harness, which makes it the runner's reference check.
"""

from __future__ import annotations

from typing import Any

from roost.agents.protocol import AgentError, AgentOutcome, EpisodeContext
from roost.envs.protocol import TextAction


class ExpertAgent:
    name = "expert"
    needs_model = False
    reset_options: dict[str, Any] = {"expert_plan": True}

    async def run(self, ctx: EpisodeContext) -> AgentOutcome:
        info = ctx.reset.info
        for turn in range(ctx.max_turns):
            plan = info.get("expert_plan")
            if not plan:
                raise AgentError(
                    f"the env gave no expert plan at turn {turn} of {ctx.task.id} "
                    "(does it support options={'expert_plan': True}?)"
                )
            step = await ctx.step(TextAction(plan[0]))
            if step.done:
                return AgentOutcome(turns=turn + 1)
            info = step.info
        return AgentOutcome(turns=ctx.max_turns, stop_reason="max_turns")
