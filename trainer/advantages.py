"""Advantage estimators: a registry of plain functions over one group of sessions.

An estimator is `fn(group: Group, **options) -> result`, where the result is
  - `None`: drop the samples it was given (the whole group, unless agents have their own
    estimators; a group left with no samples counts as dropped),
  - `{(session_id, agent_id): float}`: one advantage per agent per session,
  - `{call_id: float}`: one advantage per call,
  - `[[float, ...], ...]`: per-token advantages, one list per sample of the group.
Scalars are spread over the sampled tokens they cover. Rewards: a session's (or agent's)
reward is its outcome; a reward posted on a call is a step reward (an invalid action's
penalty, say), so an episode's return is its outcome plus its calls' step rewards.
Built-ins: `grpo`, `rloo`, `reinforce++`, `gae`, `gigpo` (per-step credit, in
`roost.trainer.gigpo`) and `distill` (a teacher's reverse KL, in `roost.trainer.distill`);
anything else is loaded by dotted path (`pkg.module:function`), so a recipe can name its own.
Advantages posted to the gateway (per token or per call) take precedence over any estimator.
In multi-agent groups each agent may use its own estimator.

Bad input is an error or documented handling, never a silent update: NaN rewards raise
(`Sample.validate`), a missing reward raises, an empty group raises, and a group whose
rewards are all equal carries no signal under grpo/rloo and is dropped by default
(`equal_rewards="zero"` keeps it with zero advantages, so only a KL term acts on it).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from roost.rollout.store.samples import Sample

EstimatorResult = dict[Any, float] | list[list[float]] | None
Estimator = Callable[..., EstimatorResult]


class AdvantageError(ValueError):
    """Advantages cannot be computed for a group as configured."""


@dataclass
class Group:
    """The samples of one group of sessions (a GRPO group: same task, several rollouts)."""

    group_id: str
    samples: list[Sample]

    def session_reward(self, sample: Sample) -> float:
        if sample.reward is None:
            raise AdvantageError(
                f"group {self.group_id!r}: session {sample.session_id!r} agent {sample.agent_id!r} has no "
                "reward; post one (POST /sessions/{sid}/reward) or drop the session"
            )
        return sample.reward

    def agent_rewards(self) -> dict[tuple[str, str], float]:
        """One return per (session, agent): its reward plus the step rewards posted on its calls
        (each call once, however many of the agent's branches pass through it)."""
        rewards: dict[tuple[str, str], float] = {}
        steps: dict[tuple[str, str], dict[str, float]] = {}
        for sample in self.samples:
            key = (sample.session_id, sample.agent_id)
            reward = self.session_reward(sample)
            if rewards.setdefault(key, reward) != reward:
                raise AdvantageError(
                    f"group {self.group_id!r}: session {key[0]!r} agent {key[1]!r} has branches with different "
                    "rewards; reward the agent once (per-step rewards go on its calls), or use a custom "
                    "estimator that returns per-call or per-token advantages"
                )
            for call in sample.calls:
                if call.reward is not None:
                    steps.setdefault(key, {})[call.call_id] = call.reward
        return {key: reward + sum(steps.get(key, {}).values()) for key, reward in rewards.items()}


@dataclass
class EstimatorConfig:
    """An estimator by registry name or dotted path, with its options."""

    name: str = "grpo"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class AdvantageConfig:
    """Which estimator each agent's samples use; `per_agent` overrides `default`."""

    default: EstimatorConfig = field(default_factory=EstimatorConfig)
    per_agent: dict[str, EstimatorConfig] = field(default_factory=dict)


@dataclass
class Scored:
    """A sample with one advantage per token (0 where the loss mask is 0); with a trained critic
    (`algorithm.critic`) also, per token, the values the advantages came from and the critic's
    targets, the returns (advantage + value; 0 where the loss mask is 0)."""

    sample: Sample
    advantages: list[float]
    values: list[float] | None = None
    returns: list[float] | None = None


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for fewer than two values)."""
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / max(len(values) - 1, 1))


def _centered(rewards: dict[Any, float], equal_rewards: str) -> dict[Any, float] | None:
    values = list(rewards.values())
    if max(values) - min(values) <= 1e-12:
        if equal_rewards == "drop":
            return None
        if equal_rewards == "zero":
            return {key: 0.0 for key in rewards}
        raise AdvantageError(f"equal_rewards must be 'drop' or 'zero', not {equal_rewards!r}")
    mean = sum(values) / len(values)
    return {key: value - mean for key, value in rewards.items()}


def grpo(group: Group, *, scale: bool = True, eps: float = 1e-6, equal_rewards: str = "drop") -> EstimatorResult:
    """(r - mean) / (std + eps) over the group's sessions; `scale=False` is Dr. GRPO."""
    rewards = group.agent_rewards()
    centered = _centered(rewards, equal_rewards)
    if centered is None or not scale:
        return centered
    _, std = mean_std(list(rewards.values()))
    return {key: value / (std + eps) for key, value in centered.items()}


def rloo(group: Group, *, equal_rewards: str = "drop") -> EstimatorResult:
    """r_i - mean of the other sessions' rewards (leave-one-out baseline)."""
    rewards = group.agent_rewards()
    n = len(rewards)
    if n < 2:
        return _centered(rewards, equal_rewards)
    if _centered(rewards, equal_rewards) is None:
        return None
    total = sum(rewards.values())
    return {key: value - (total - value) / (n - 1) for key, value in rewards.items()}


def reinforce_pp(group: Group, *, baseline: bool = True) -> EstimatorResult:
    """REINFORCE++: the reward (minus the group mean with `baseline`), whitened over the
    whole batch afterwards (see `compute_advantages`)."""
    rewards = group.agent_rewards()
    if not baseline:
        return rewards
    mean = sum(rewards.values()) / len(rewards)
    return {key: value - mean for key, value in rewards.items()}


reinforce_pp.batch_whiten = True  # type: ignore[attr-defined]


def gae(
    group: Group, *, critic: str | Callable[[list[Sample]], list[list[float]]], gamma: float = 1.0, lam: float = 0.95
) -> EstimatorResult:
    """Generalised advantage estimation over each sample's sampled tokens.

    `critic(samples)` gives a value per token of each sample (a value model's forward, or
    any dotted-path function). Steps are the sampled tokens in order; per-call rewards
    land on each call's last token, the sample's reward on its last sampled token.
    """
    value_fn = load_function(critic) if isinstance(critic, str) else critic
    values = value_fn(group.samples)
    if len(values) != len(group.samples):
        raise AdvantageError(f"critic returned {len(values)} value lists for {len(group.samples)} samples")
    return [_gae_one(s, v, gamma, lam) for s, v in zip(group.samples, values)]


def _gae_one(sample: Sample, values: Sequence[float], gamma: float, lam: float) -> list[float]:
    steps = [i for i, m in enumerate(sample.loss_mask) if m]
    rewards = [0.0] * len(steps)
    for k, i in enumerate(steps):
        last_of_call = k + 1 == len(steps) or sample.token_call[steps[k + 1]] != sample.token_call[i]
        reward = sample.calls[sample.token_call[i]].reward
        if last_of_call and reward is not None:
            rewards[k] += reward
    if steps and sample.reward is not None:
        rewards[-1] += sample.reward
    out = [0.0] * len(sample.tokens)
    running = 0.0
    for k in reversed(range(len(steps))):
        next_value = values[steps[k + 1]] if k + 1 < len(steps) else 0.0
        delta = rewards[k] + gamma * next_value - values[steps[k]]
        running = delta + gamma * lam * running
        out[steps[k]] = running
    return out


ESTIMATORS: dict[str, str] = {
    "grpo": "roost.trainer.advantages:grpo",
    "rloo": "roost.trainer.advantages:rloo",
    "reinforce++": "roost.trainer.advantages:reinforce_pp",
    "gae": "roost.trainer.advantages:gae",
    "gigpo": "roost.trainer.gigpo:gigpo",
    "distill": "roost.trainer.distill:distill",
}


def load_function(path: str) -> Callable[..., Any]:
    """Load `pkg.module:function` (or `pkg.module.function`)."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise AdvantageError(f"{path!r} is not a dotted path like 'my_pkg.rewards:my_advantages'")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise AdvantageError(f"cannot load {path!r}: {exc}") from exc
    if not callable(fn):
        raise AdvantageError(f"{path!r} is not callable")
    return fn


def load_estimator(name: str) -> Estimator:
    """A registered estimator by name, or a user function by dotted path."""
    return load_function(ESTIMATORS.get(name, name))


def per_token(group: Group, result: EstimatorResult, source: str) -> list[list[float]]:
    """Turn an estimator's result into per-token advantages for each sample."""
    if isinstance(result, list):
        if len(result) != len(group.samples):
            raise AdvantageError(f"{source}: {len(result)} per-token lists for {len(group.samples)} samples")
        for sample, values in zip(group.samples, result):
            if len(values) != len(sample.tokens):
                raise AdvantageError(f"{source}: {len(values)} advantages for a sample of {len(sample.tokens)} tokens")
        return [[float(v) * m for v, m in zip(values, s.loss_mask)] for s, values in zip(group.samples, result)]
    if not isinstance(result, dict):
        raise AdvantageError(f"{source} returned {type(result).__name__}; expected None, a dict or a list of lists")
    out = []
    for sample in group.samples:
        agent_key = (sample.session_id, sample.agent_id)
        tokens = []
        for mask, call in zip(sample.loss_mask, sample.token_call):
            if not mask:
                tokens.append(0.0)
                continue
            value = result.get(sample.calls[call].call_id, result.get(agent_key))
            if value is None:
                raise AdvantageError(f"{source} gave no advantage for session {agent_key[0]!r} agent {agent_key[1]!r}")
            tokens.append(float(value))
        out.append(tokens)
    return out


def _posted(sample: Sample, estimated: list[float] | None) -> list[float] | None:
    """Apply advantages posted to the gateway over the estimate (posted wins)."""
    out = list(estimated) if estimated is not None else None
    for i, (mask, call) in enumerate(zip(sample.loss_mask, sample.token_call)):
        if not mask:
            continue
        posted = sample.advantages[i] if sample.advantages is not None else None
        if posted is None:
            posted = sample.calls[call].advantage
        if posted is not None:
            if out is None:
                out = [0.0] * len(sample.tokens)
            out[i] = float(posted)
        elif out is None:
            return None
    return out


def _fully_posted(sample: Sample) -> bool:
    tokens = sample.advantages or [None] * len(sample.tokens)
    return all(
        tokens[i] is not None or sample.calls[c].advantage is not None
        for i, (m, c) in enumerate(zip(sample.loss_mask, sample.token_call))
        if m
    )


def compute_advantages(groups: Sequence[Group], config: AdvantageConfig) -> tuple[list[Scored], dict[str, int]]:
    """Score every sample of every group; returns the kept samples and drop counts."""
    kept: list[Scored] = []
    stats = {"groups": len(groups), "dropped_groups": 0, "samples": 0}
    whiten: list[Scored] = []
    for group in groups:
        if not group.samples:
            raise AdvantageError(f"group {group.group_id!r} is empty: it has no samples to score")
        for sample in group.samples:
            sample.validate()
        scored = _score_group(group, config, whiten)
        if scored is None:
            stats["dropped_groups"] += 1
            continue
        kept.extend(scored)
    _whiten(whiten)
    stats["samples"] = len(kept)
    return kept, stats


def _score_group(group: Group, config: AdvantageConfig, whiten: list[Scored]) -> list[Scored] | None:
    by_agent: dict[str, list[Sample]] = {}
    for sample in group.samples:
        by_agent.setdefault(sample.agent_id, []).append(sample)
    scored: list[Scored] = []
    for agent, samples in by_agent.items():
        estimator_config = config.per_agent.get(agent, config.default)
        if all(_fully_posted(s) for s in samples):
            scored.extend(Scored(s, _posted(s, None) or []) for s in samples)
            continue
        estimator = load_estimator(estimator_config.name)
        sub = Group(group.group_id, samples)
        result = estimator(sub, **estimator_config.options)
        if result is None:
            continue
        source = f"estimator {estimator_config.name!r} on group {group.group_id!r}"
        for sample, values in zip(samples, per_token(sub, result, source)):
            item = Scored(sample, _posted(sample, values) or values)
            if not all(math.isfinite(v) for v in item.advantages):
                raise AdvantageError(f"{source} produced non-finite advantages")
            scored.append(item)
            if getattr(estimator, "batch_whiten", False):
                whiten.append(item)
    return scored or None


def _whiten(items: list[Scored]) -> None:
    values = [a for item in items for a, m in zip(item.advantages, item.sample.loss_mask) if m]
    if len(values) < 2:
        return
    mean, std = mean_std(values)
    for item in items:
        item.advantages = [
            (a - mean) / (std + 1e-6) if m else 0.0 for a, m in zip(item.advantages, item.sample.loss_mask)
        ]
