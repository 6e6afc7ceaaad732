"""What an agent harness is given, and what it must do.

The runner starts the episode, then hands the harness an `EpisodeContext`: the task,
the first observation, the env's tools, an OpenAI `base_url` (a gateway session URL
when trajectories are recorded) and `step`, which applies one action to the env.
The harness plays until `step` returns a finished step or it gives up; rewards are
the runner's business (a harness that finds its own, as a command's reward file, reports it in
its `AgentOutcome` for the runner to use when the env did not end the episode).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from roost.envs.protocol import Action, Reset, Step, Task, ToolSchema
from roost.outcome import EpisodeStatus, RewardSource


class AgentError(RuntimeError):
    """The harness could not go on (no plan, a bug); the episode is not scored."""

    status = EpisodeStatus.AGENT_ERROR
    """The episode's status when this ends it (a subclass may name a more precise one)."""


class HarnessTimeout(AgentError):
    """The harness was still running past the runner's `timeout_s`: the episode ends `timeout`."""

    status = EpisodeStatus.TIMEOUT


class ModelUnavailable(RuntimeError):
    """The model endpoint failed (connection, 5xx); an infrastructure fault, not the policy's."""


@dataclass
class EpisodeContext:
    task: Task
    reset: Reset
    tools: list[ToolSchema]
    """The env's tool schemas, fixed for the whole episode (so prompts extend turn by turn)."""
    step: Callable[[Action], Awaitable[Step]]
    base_url: str | None = None
    api_key: str | None = None
    model: str | None = None
    max_turns: int = 50
    workspace: Callable[[], Awaitable[bytes]] | None = None
    """The episode's working tree as a gzip'd tar, from envs that have one (SWE); else it raises
    `NoWorkspaceError`."""


@dataclass
class AgentOutcome:
    turns: int = 0
    invalid_actions: int = 0
    invalid_calls: list[int] = field(default_factory=list)
    """Which model calls (0-based, in the order the harness made them) chose an action the env
    refused, for harnesses that know: the runner then puts the invalid-action penalty on
    those calls as step rewards, instead of on the whole episode."""
    stop_reason: str = "done"
    """done | max_turns | context_length | gave_up"""
    error: str | None = None
    """Why the harness stopped, when an error stopped it (e.g. the model endpoint's refusal);
    the episode is still scored."""
    reward: float | None = None
    """The harness's own reward (a command's reward file): the episode's reward when the env did
    not end the episode and `reward_source` is `file`."""
    reward_source: RewardSource = RewardSource.ENV
    """Where the reward of an episode the env did not end comes from: the env's step rewards
    (`env`), or the harness's own `reward` (`file`; when that is None the episode has no reward,
    `none`, and the runner posts none)."""
    exit_code: int | None = None
    """A harness command's exit status (None: killed at its timeout)."""
    output_tail: str = ""
    """The end of a harness command's output."""
    extra: dict[str, Any] = field(default_factory=dict)


class Agent(Protocol):
    name: str
    needs_model: bool
    reset_options: dict[str, Any]
    """Options the agent asks the env for at reset (e.g. an expert plan)."""

    async def run(self, ctx: EpisodeContext) -> AgentOutcome: ...
