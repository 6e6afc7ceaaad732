"""How an episode ended, as the gateway stores it and everyone else reads it.

One contract from the runner that posts it (`POST /sessions/{sid}/finish`), through the
gateway and the trajectory store (columns of the sessions table), to the trainer that filters
on it and `roost eval` that prints it. Imports nothing of roost, so every package may import it.

    outcome = EpisodeOutcome(status=EpisodeStatus.OK, reward=1.0, reward_source=RewardSource.ENV)
    outcome.trainable        # scored, rewarded, and played for training

The values are a stored contract: renaming one would misread every stored session.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class SessionStatus(StrEnum):
    """Whether a gateway session still takes calls."""

    OPEN = "open"
    FINISHED = "finished"


class EpisodeStatus(StrEnum):
    OK = "ok"
    """Played to its end (won, lost or given up): scored and trained on."""
    INFRA_ERROR = "infra_error"
    """An env fault, a lost env server, a failed model endpoint or gateway: not the policy's doing."""
    TIMEOUT = "timeout"
    """The harness was still running past the runner's `timeout_s`."""
    AGENT_ERROR = "agent_error"
    """The harness could not go on (no plan, a bug)."""


class RewardSource(StrEnum):
    """Where an episode's reward came from."""

    ENV = "env"
    """The env's step rewards: its verdict when it ended the episode."""
    FILE = "file"
    """The harness's own report (a command's reward file), for an episode the env did not end."""
    NONE = "none"
    """Neither: the env did not end the episode and the harness, which reports its own, gave none."""
    JUDGE = "judge"
    """A judge model's verdict on the episode's transcript (`roost.agents.judge`), alone or added to the env's."""


class EpisodeKind(StrEnum):
    """What the episode was played for: only `train` episodes become RL batches."""

    TRAIN = "train"
    EVAL = "eval"
    SFT = "sft"
    """An expert's demonstration, recorded for supervised training."""
    JUDGE = "judge"
    """A judge's verdict on another episode (`roost.agents.judge`): the judge's calls, never the policy's."""


UNSCORED = tuple(s for s in EpisodeStatus if s is not EpisodeStatus.OK)
"""Statuses of episodes that get no reward: left out of success rates and of training."""


class EpisodeOutcome(BaseModel):
    """How one episode ended: the part of a session's finish that decides what it is good for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: EpisodeStatus = EpisodeStatus.OK
    reward: float | None = None
    """The env's (or the harness's, or a judge's) reward; None for an unscored episode or `reward_source` none."""
    reward_source: RewardSource = RewardSource.NONE
    kind: EpisodeKind = EpisodeKind.TRAIN
    reason: str | None = Field(None, max_length=4000)
    """Why an unscored episode ended (the env fault, the harness's error), for people."""

    @property
    def scored(self) -> bool:
        return self.status is EpisodeStatus.OK and self.reward is not None

    @property
    def trainable(self) -> bool:
        return self.scored and self.kind is EpisodeKind.TRAIN

    @classmethod
    def from_info(cls, info: dict[str, Any], *, kind: EpisodeKind = EpisodeKind.TRAIN) -> EpisodeOutcome:
        """The outcome of a finish that carried only free `info` (a client that predates the typed
        outcome, or a store written before it), read as the trainer always read it: no `status`
        is `ok`, a status no roost runner posts is `agent_error` (counted, never trained on); an `ok`
        finish without a `reward` key scored 0 (the rewards trained on are those posted to
        `/reward`), one whose reward is null has none."""
        try:
            status = EpisodeStatus(info.get("status", EpisodeStatus.OK))
        except ValueError:
            status = EpisodeStatus.AGENT_ERROR
        reward = info.get("reward", 0.0) if status is EpisodeStatus.OK else None
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            reward = None
        try:
            source = RewardSource(
                info.get("reward_source", RewardSource.ENV if reward is not None else RewardSource.NONE)
            )
        except ValueError:
            source = RewardSource.NONE
        error = info.get("error")
        return cls(
            status=status,
            reward=None if reward is None else float(reward),
            reward_source=source,
            kind=kind,
            reason=str(error)[:4000] if error else None,
        )
