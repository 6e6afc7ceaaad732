"""GiGPO (Feng et al. 2025, arXiv:2505.10978): credit per step for multi-turn agents.

    algorithm: {advantage: {name: gigpo, options: {gamma: 0.95, step_weight: 1.0}}}

GRPO gives every call of an episode the episode's advantage, so a good move in a failed
episode is pushed down with the rest. GiGPO adds a step advantage: each call of the group
whose episode had reached the same observation (its anchor state) is compared with the
others that acted from there, by discounted return from that step on (step rewards posted on
the calls, then the outcome at the episode's last call). A step that wastes a turn, or earns
a step penalty, scores below its peers at the same state, whatever the episode's outcome.

The anchor state is what the agent saw new before a call: the exact token ids between its
previous sampled reply and this call's reply (the env's observation in its chat turn), or the
whole prompt for an episode's first call. Derived from token ids, not text, like everything
the trainer computes. A call's advantage is `episode + step_weight * step`; a state reached
once has a step advantage of 0.

An episode's steps are the calls of one sample, so the estimator wants each agent's
conversation as one growing sample (the gateway's `keep` reasoning policy, or any harness
whose turns extend each other). Where turns fork (`drop`), each path is scored as an episode
of its own, and its anchors hold its whole history, so few states are shared.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from roost.rollout.store.samples import Sample

from .advantages import AdvantageError, EstimatorResult, Group, grpo, mean_std


@dataclass(frozen=True)
class Step:
    call_id: str
    agent_key: tuple[str, str]
    anchor: tuple[int, ...]
    ret: float
    """Discounted return from this step to the end of its episode."""


def gigpo(
    group: Group,
    *,
    gamma: float = 0.95,
    step_weight: float = 1.0,
    scale: bool = True,
    eps: float = 1e-6,
    equal_rewards: str = "drop",
    equal_outcomes: str = "keep",
) -> EstimatorResult:
    """Episode advantage (GRPO over returns) plus `step_weight` × the anchor-state step advantage.

    `scale=False` centres both levels without dividing by their std (verl-agent's `mean_norm`);
    a group where neither level varies is dropped (`equal_rewards="drop"`) or kept at zero.
    `equal_outcomes="drop"` also drops a group whose episodes all ended alike (all won or all
    lost), whatever their step rewards: DAPO's dynamic-sampling filter, which trains on the
    groups that say what wins.
    """
    if not 0.0 <= gamma <= 1.0:
        raise AdvantageError(f"gigpo: gamma must be in [0, 1], not {gamma}")
    if equal_rewards not in ("drop", "zero"):
        raise AdvantageError(f"equal_rewards must be 'drop' or 'zero', not {equal_rewards!r}")
    if equal_outcomes not in ("drop", "keep"):
        raise AdvantageError(f"equal_outcomes must be 'drop' or 'keep', not {equal_outcomes!r}")
    if equal_outcomes == "drop" and len({group.session_reward(s) for s in group.samples}) == 1:
        return None
    episode = grpo(group, scale=scale, eps=eps, equal_rewards="zero") or {}
    steps = list(_unique_steps(group, gamma))
    step_advantages = _anchor_advantages(steps, scale, eps)
    if equal_rewards == "drop" and all(abs(v) <= 1e-12 for v in (*episode.values(), *step_advantages.values())):
        return None
    return {s.call_id: episode[s.agent_key] + step_weight * step_advantages[s.call_id] for s in steps}


def _unique_steps(group: Group, gamma: float) -> Iterator[Step]:
    seen: set[str] = set()
    for sample in group.samples:
        for step in episode_steps(sample, group.session_reward(sample), gamma):
            if step.call_id not in seen:  # branches of one agent share their first calls
                seen.add(step.call_id)
                yield step


def episode_steps(sample: Sample, outcome: float, gamma: float) -> list[Step]:
    """The sample's calls in order, each with its anchor state and discounted return."""
    spans = sample.spans()
    rewards = [sample.calls[call].reward or 0.0 for call, _, _ in spans]
    if rewards:
        rewards[-1] += outcome
    returns, running = [0.0] * len(rewards), 0.0
    for k in reversed(range(len(rewards))):
        running = rewards[k] + gamma * running
        returns[k] = running
    key = (sample.session_id, sample.agent_id)
    starts = [0] + [end for _, _, end in spans[:-1]]
    return [
        Step(sample.calls[call].call_id, key, tuple(sample.tokens[before:start]), ret)
        for (call, start, _), before, ret in zip(spans, starts, returns)
    ]


def _anchor_advantages(steps: list[Step], scale: bool, eps: float) -> dict[str, float]:
    by_anchor: dict[tuple[int, ...], list[Step]] = {}
    for step in steps:
        by_anchor.setdefault(step.anchor, []).append(step)
    out: dict[str, float] = {}
    for peers in by_anchor.values():
        mean, std = mean_std([s.ret for s in peers])
        for step in peers:
            if std <= 1e-12:  # a state reached once, or every peer did as well as the others
                out[step.call_id] = 0.0
            else:
                out[step.call_id] = (step.ret - mean) / (std + eps) if scale else step.ret - mean
    return out
