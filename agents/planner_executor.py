"""Two agents, one episode: a planner writes a short plan, an executor acts on it.

    roost eval alfworld --agent roost.agents.planner_executor:PlannerExecutor --base-url GATEWAY

Both call the model through the episode's gateway session, each as its own agent
(`/sessions/{sid}/agents/planner/v1`, `/sessions/{sid}/agents/executor/v1`), so the store
holds one token tree per agent and the trainer one sample per agent. The env's reward is the session's, shared by both; a recipe decides how to
split the credit (see recipes/multi_agent).
"""

from __future__ import annotations

from typing import Any

from roost.agents.protocol import AgentError, AgentOutcome, EpisodeContext
from roost.agents.tool_agent import SYSTEM_PROMPT, ToolAgent

PLANNER_PROMPT = (
    "You plan for an agent in a text environment. Read the task and the observation, then write "
    "a short numbered plan of commands. Do not act yourself."
)


def agent_url(base_url: str, agent: str) -> str:
    """The session URL of one agent: `{gw}/sessions/{sid}/v1` → `{gw}/sessions/{sid}/agents/{agent}/v1`."""
    if not base_url.rstrip("/").endswith("/v1"):
        raise AgentError(f"the planner-executor needs a gateway session URL ending in /v1, got {base_url!r}")
    return base_url.rstrip("/")[: -len("/v1")] + f"/agents/{agent}/v1"


class PlannerExecutor:
    name = "planner-executor"
    needs_model = True
    reset_options: dict[str, Any] = {}

    def __init__(
        self, temperature: float = 0.7, max_tokens: int = 256, plan_tokens: int = 128, timeout_s: float = 600.0
    ) -> None:
        self.temperature, self.max_tokens = temperature, max_tokens
        self.plan_tokens, self.timeout_s = plan_tokens, timeout_s

    async def run(self, ctx: EpisodeContext) -> AgentOutcome:
        if not ctx.base_url:
            raise AgentError("the planner-executor needs a model: pass --base-url (a roost gateway)")
        plan = await self._plan(ctx)
        executor = ToolAgent(
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            timeout_s=self.timeout_s,
            system_prompt=f"{SYSTEM_PROMPT}\n\nThe planner's plan:\n{plan}",
        )
        executor_ctx = EpisodeContext(
            ctx.task,
            ctx.reset,
            ctx.tools,
            ctx.step,
            agent_url(ctx.base_url, "executor"),
            ctx.api_key,
            ctx.model,
            ctx.max_turns,
            ctx.workspace,
        )
        outcome = await executor.run(executor_ctx)
        outcome.extra["plan"] = plan
        return outcome

    async def _plan(self, ctx: EpisodeContext) -> str:
        import openai

        from roost.agents.protocol import ModelUnavailable

        client = openai.AsyncOpenAI(
            base_url=agent_url(ctx.base_url or "", "planner"),
            api_key=ctx.api_key or "EMPTY",
            timeout=self.timeout_s,
            max_retries=2,
        )
        try:
            model = ctx.model or (await client.models.list()).data[0].id
            reply = await client.chat.completions.create(
                model=model,
                temperature=self.temperature,
                max_tokens=self.plan_tokens,
                messages=[
                    {"role": "system", "content": PLANNER_PROMPT},
                    {"role": "user", "content": ctx.reset.observation.text},
                ],
            )
        except (openai.APIConnectionError, openai.InternalServerError, openai.RateLimitError) as exc:
            raise ModelUnavailable(f"model endpoint {ctx.base_url} failed: {exc}") from exc
        finally:
            await client.close()
        return (reply.choices[0].message.content or "").strip()
