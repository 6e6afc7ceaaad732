"""PPO's advantages from a trained critic: the trainer's values into every `gae` estimator, and
the critic's targets back onto the scored samples.

    scored, counts = critic_advantages(batch.groups, config, trainer.values)
    scored[0].values, scored[0].returns      # per token: V_old and GAE's return A + V

`values_of(samples)` is asked once for the whole batch (one forward of the value head over the
batch's prefix trees, `megatron/critic.py`); each group's `gae` then reads its samples' values
from that answer, so GAE is written once (`advantages.gae`, its steps the sampled tokens, context
tokens skipped). The returns the value head trains on are the advantages the policy trains on
plus the values they came from (an advantage posted to the gateway included).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from roost.rollout.store.samples import Sample

from .advantages import AdvantageConfig, EstimatorConfig, Group, Scored, compute_advantages

ValuesOf = Callable[[list[Sample]], list[list[float]]]


def critic_advantages(
    groups: Sequence[Group], config: AdvantageConfig, values_of: ValuesOf
) -> tuple[list[Scored], dict[str, int]]:
    """`compute_advantages` with `values_of`'s values as every gae estimator's critic; each kept
    sample a gae estimator scored carries its values and returns (another estimator's advantages
    are no returns of these values: its samples carry none, and the critic does not train on them)."""
    samples = [sample for group in groups for sample in group.samples]
    values = values_of(samples)
    by_sample = {id(sample): v for sample, v in zip(samples, values, strict=True)}

    def critic(part: list[Sample]) -> list[list[float]]:
        return [by_sample[id(sample)] for sample in part]

    scored, counts = compute_advantages(groups, with_critic(config, critic))
    for item in scored:
        if config.per_agent.get(item.sample.agent_id, config.default).name != "gae":
            continue
        item.values = by_sample[id(item.sample)]
        item.returns = returns(item.advantages, item.values, item.sample.loss_mask)
    return scored, counts


def with_critic(config: AdvantageConfig, critic: Callable[[list[Sample]], list[list[float]]]) -> AdvantageConfig:
    """`config` with `critic` as the critic option of each of its gae estimators."""

    def filled(estimator: EstimatorConfig) -> EstimatorConfig:
        if estimator.name != "gae":
            return estimator
        return replace(estimator, options={**estimator.options, "critic": critic})

    return AdvantageConfig(filled(config.default), {agent: filled(e) for agent, e in config.per_agent.items()})


def returns(advantages: Sequence[float], values: Sequence[float], loss_mask: Sequence[int]) -> list[float]:
    """The critic's target per token: advantage + value at the sampled tokens, 0 elsewhere."""
    return [a + v if m else 0.0 for a, v, m in zip(advantages, values, loss_mask, strict=True)]
