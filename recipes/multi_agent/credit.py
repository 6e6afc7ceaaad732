"""Credit assignment for the planner–executor recipe: a custom advantage hook, loaded by dotted
path (`credit:planner_share`; the recipe puts this folder on the import path).

Both agents share the episode's reward. The executor takes plain GRPO on it; the planner's
advantage is the same group-normalised reward scaled by `share`: its plan is one cause of
the outcome among the executor's many actions, so it moves less per episode.
"""

from __future__ import annotations

from roost.trainer.advantages import Group, grpo


def planner_share(group: Group, *, share: float = 0.5, equal_rewards: str = "drop") -> dict | None:
    """GRPO over the sessions' shared reward, times `share` (called with the planner's samples)."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be within [0, 1], got {share}")
    advantages = grpo(group, equal_rewards=equal_rewards)
    return None if advantages is None else {key: value * share for key, value in advantages.items()}
