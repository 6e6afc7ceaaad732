"""How an episode ended: the runner's `EpisodeResult`, read by eval, `roost run` and the RL loop.

The values of the status and the reward source are a stored contract: the runner posts them
in each gateway session's finish info (`{"status": "timeout", ...}`), the trainer reads them
back from the store, and `roost eval --json` prints them. Renaming a value would misread every stored session.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any


class EpisodeStatus(StrEnum):
    OK = "ok"
    """Played to its end (won, lost or given up): scored and trained on."""
    INFRA_ERROR = "infra_error"
    """An env fault, a lost env server, a failed model endpoint or gateway: not the policy's doing."""
    TIMEOUT = "timeout"
    """The harness was still running past the rollout's `agent.timeout_s`."""
    AGENT_ERROR = "agent_error"
    """The harness could not go on (no plan, a bug)."""


class RewardSource(StrEnum):
    """Where an episode's reward came from (stored in its session's finish info, printed by `roost run`)."""

    ENV = "env"
    """The env's step rewards: its verdict when it ended the episode."""
    FILE = "file"
    """The harness's own report (a command's reward file), for an episode the env did not end."""
    NONE = "none"
    """Neither: the env did not end the episode and the harness, which reports its own, gave none."""


UNSCORED = tuple(s for s in EpisodeStatus if s is not EpisodeStatus.OK)
"""Statuses of episodes that get no reward: left out of success rates and of training."""


@dataclass(frozen=True)
class EpisodeResult:
    task_id: str
    split: str
    status: EpisodeStatus = EpisodeStatus.OK
    reward: float | None = 0.0
    """None only when `reward_source` is `none`."""
    reward_source: RewardSource = RewardSource.ENV
    success: bool = False
    steps: int = 0
    turns: int = 0
    invalid_actions: int = 0
    stop_reason: str = ""
    session_id: str | None = None
    error: str | None = None
    seconds: float = 0.0
    exit_code: int | None = None
    """A harness command's exit status; None when it ran past its timeout (or no command ran)."""
    output_tail: str = ""
    """The end of a harness command's output."""

    @property
    def scored(self) -> bool:
        return self.status is EpisodeStatus.OK

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status.value, "reward_source": self.reward_source.value}
