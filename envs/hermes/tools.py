"""The Hermes env's one action: `run_agent`, which starts the episode's hermes-agent and waits on it.

The agent itself is the env's: its tools run in the episode's sandbox and its model is
whatever OpenAI-compatible endpoint the first call names (a gateway session URL, so every
call is recorded). Its run outlasts any one request, so a call returns when the agent
finishes or after `wait_s` seconds, and the harness calls again until the episode is done.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from roost.envs.errors import InvalidActionError
from roost.envs.protocol import Action, TextAction, ToolSchema

RUN_AGENT = "run_agent"

TOOLS: list[ToolSchema] = [
    {
        "type": "function",
        "function": {
            "name": RUN_AGENT,
            "description": "Run this episode's hermes-agent on the task: the first call starts it with the given model "
            "endpoint, later calls keep waiting. Returns when the agent has finished (its work is then "
            "verified and rewarded) or after wait_s seconds.",
            "parameters": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "base_url": {
                        "type": "string",
                        "description": "OpenAI-compatible base URL of the model (first call).",
                    },
                    "api_key": {"type": "string", "description": "Key for base_url (a gateway session key)."},
                    "model": {"type": "string", "description": "Model name sent with each request (first call)."},
                    "max_iterations": {
                        "type": "integer",
                        "description": "Model calls the agent may make (first call).",
                    },
                    "wait_s": {"type": "number", "description": "Longest time this call waits for the agent."},
                },
                "required": [],
            },
        },
    }
]


class RunAgent(BaseModel):
    """The checked arguments of a `run_agent` call."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = None
    api_key: str | None = None
    model: str | None = None
    max_iterations: int | None = Field(None, gt=0)
    wait_s: float | None = Field(None, ge=0)


def parse_action(action: Action) -> RunAgent:
    if isinstance(action, TextAction):
        raise InvalidActionError(
            f"the Hermes env takes one tool, {RUN_AGENT!r} (its agent acts in the sandbox "
            "itself); send a tool call, not text"
        )
    if action.name != RUN_AGENT:
        raise InvalidActionError(f"unknown tool {action.name!r}; the Hermes env offers only {RUN_AGENT!r}")
    try:
        return RunAgent.model_validate(action.parsed_arguments())
    except ValidationError as exc:
        raise InvalidActionError(f"bad arguments of {RUN_AGENT!r}: {exc}") from None
