"""How an episode ended: the runner's `EpisodeResult`, read by eval, `roost run` and the RL loop.

Its status, reward and reward source are the stored contract of `roost.outcome`: the runner posts
them as the session's `EpisodeOutcome` when it finishes the session, the trainer reads them back
from the store's columns, and `roost eval --json` prints them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from roost.outcome import EpisodeKind, EpisodeOutcome, EpisodeStatus, RewardSource


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
    env_reward: float | None = None
    """The env's (or the harness's) own reward when a judge's verdict made `reward` (`reward_source`
    judge); else None, and `reward` is it."""
    judge_session_id: str | None = None
    """The judge's session on its gateway, when a judge was asked (its verdict, or why none came)."""

    @property
    def scored(self) -> bool:
        return self.status is EpisodeStatus.OK

    def outcome(self, kind: EpisodeKind) -> EpisodeOutcome:
        """What the session of this episode stores: the reward only when the episode was scored."""
        return EpisodeOutcome(
            status=self.status,
            reward=self.reward if self.scored else None,
            reward_source=self.reward_source if self.scored else RewardSource.NONE,
            kind=kind,
            reason=self.error[:4000] if self.error else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status.value, "reward_source": self.reward_source.value}
