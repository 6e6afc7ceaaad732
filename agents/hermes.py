"""hermes-agent as a roost harness: the Hermes env runs the agent, this drives it.

hermes-agent's `AIAgent` lives in the Hermes env (`roost.envs.hermes`), next to the sandbox
its terminal and file tools act in, and inside that env's container with its own pinned
dependencies. The harness gives it its model: the first `run_agent` step names the episode's
`base_url` (the gateway session, so every call is recorded), key and model; later steps wait
until the env reports the episode done. The reward is the env's (the task's verifier).

A model endpoint that stops answering ends the episode with status `model_unavailable`; the
harness raises `ModelUnavailable`, so the runner marks the episode `infra_error`, unscored.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from roost.agents.protocol import AgentError, AgentOutcome, EpisodeContext, ModelUnavailable
from roost.envs.protocol import ToolCall

RUN_AGENT = "run_agent"
STOP_REASONS = {"finished": "done", "max_iterations": "max_turns", "context_length": "context_length"}
"""The env's status of a finished episode → the harness's stop reason (anything else: gave_up)."""


class HermesAgentConfig(BaseModel):
    """Keyword arguments of HermesAgent (`--agent-arg KEY=VALUE`)."""

    model_config = ConfigDict(extra="forbid")

    wait_s: float = Field(20.0, ge=0)
    """How long one step waits on the env's agent before reporting progress."""
    max_iterations: int | None = Field(None, gt=0)
    """Model calls per episode; default: the runner's max_turns (the env may cap it lower)."""
    max_polls: int = Field(10_000, gt=0)
    """Steps before giving up on an agent that never finishes."""


class HermesAgent:
    """roost's Agent protocol around the Hermes env's hosted hermes-agent."""

    name = "hermes-agent"
    needs_model = True
    reset_options: dict[str, Any] = {}

    def __init__(self, **kwargs: Any) -> None:
        self.config = HermesAgentConfig(**kwargs)

    async def run(self, ctx: EpisodeContext) -> AgentOutcome:
        if not ctx.base_url:
            raise AgentError("hermes-agent needs a model: pass --base-url (a gateway or an OpenAI endpoint)")
        if not any(t["function"]["name"] == RUN_AGENT for t in ctx.tools):
            raise AgentError(
                f"this env offers no {RUN_AGENT!r} tool: the hermes-agent harness plays the Hermes "
                "env (roost eval hermes --agent hermes)"
            )
        model = ctx.model or await _first_model(ctx.base_url, ctx.api_key)
        args: dict[str, Any] = {
            "base_url": ctx.base_url,
            "api_key": ctx.api_key or "EMPTY",
            "model": model,
            "max_iterations": self.config.max_iterations or ctx.max_turns,
            "wait_s": self.config.wait_s,
        }
        for _ in range(self.config.max_polls):
            step = await ctx.step(ToolCall(RUN_AGENT, args))
            if step.done:
                return _outcome(step.info)
            args = {"wait_s": self.config.wait_s}
        raise AgentError(f"the env's hermes-agent did not finish within {self.config.max_polls} steps")


def _outcome(info: dict[str, Any]) -> AgentOutcome:
    status = info.get("status", "")
    if status == "model_unavailable":
        raise ModelUnavailable(f"the model endpoint failed during hermes-agent's run: {_error(info)}")
    stop = STOP_REASONS.get(status, "gave_up")
    return AgentOutcome(
        turns=int(info.get("api_calls") or 0),
        stop_reason=stop,
        error=_error(info),
        extra={"status": status, "exit_reason": info.get("exit_reason", ""), "tool_calls": info.get("tool_calls", [])},
    )


def _error(info: dict[str, Any]) -> str | None:
    """hermes-agent's own error and what the model endpoint last refused, when there are any."""
    error, refusal = info.get("error"), info.get("endpoint_error")
    refused = f"the model endpoint answered: {refusal}" if refusal else None
    return f"{error} ({refused})" if error and refused else (str(error) if error else refused)


async def _first_model(base_url: str, api_key: str | None) -> str:
    import httpx

    try:
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.get(
                f"{base_url.rstrip('/')}/models", headers={"Authorization": f"Bearer {api_key or 'EMPTY'}"}
            )
            response.raise_for_status()
            return response.json()["data"][0]["id"]
    except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
        raise ModelUnavailable(f"could not list the models of {base_url}: {exc}; pass --model") from exc
