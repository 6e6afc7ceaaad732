"""GiGPO: episode advantage plus the anchor-state step advantage, on hand-computed groups."""

from __future__ import annotations

import dataclasses

import pytest

from roost.rollout.store.samples import Sample
from roost.trainer.advantages import AdvantageConfig, AdvantageError, EstimatorConfig, Group, compute_advantages
from roost.trainer.gigpo import episode_steps

SYSTEM = [1, 2]  # every episode of the group starts from the same prompt


def episode(
    session: str, turns: list[tuple[list[int], int]], reward: float, step_rewards: dict[int, float] | None = None
) -> Sample:
    """`turns`: (observation tokens before the call, the one token it sampled)."""
    sample = Sample.from_turns(
        [(context, [token], [-0.5]) for context, token in turns], session_id=session, group_id="g", reward=reward
    )
    rewards = step_rewards or {}
    sample.calls = [dataclasses.replace(c, reward=rewards.get(i)) for i, c in enumerate(sample.calls)]
    return sample


def per_call(scored) -> dict[str, list[float]]:
    out = {}
    for item in scored:
        values = []
        for index, _ in enumerate(item.sample.calls):
            tokens = {a for a, c in zip(item.advantages, item.sample.token_call) if c == index}
            assert len(tokens) == 1
            values.append(tokens.pop())
        out[item.sample.session_id] = values
    return out


def run(groups, **options):
    return compute_advantages(groups, AdvantageConfig(default=EstimatorConfig("gigpo", options)))


def test_steps_from_the_same_state_are_compared_by_discounted_return():
    # a: two turns to success. b: an invalid first move (step reward -0.1), then a detour to
    # the state a reached, then success. Returns with gamma 0.5:
    #   a: [0.5, 1.0]    b: [-0.1 + 0.25, 0.5, 1.0] = [0.15, 0.5, 1.0]
    # episode returns 1.0 and 0.9 → centred ±0.05; anchor SYSTEM: 0.5 vs 0.15 → ±0.175;
    # anchor [3]: 1.0 vs 1.0 → 0; anchor [4] reached once → 0.
    a = episode("a", [(SYSTEM, 10), ([3], 11)], 1.0)
    b = episode("b", [(SYSTEM, 12), ([4], 13), ([3], 11)], 1.0, {0: -0.1})
    scored, stats = run([Group("g", [a, b])], gamma=0.5, scale=False)
    assert stats["dropped_groups"] == 0
    values = per_call(scored)
    assert values["a"] == pytest.approx([0.225, 0.05])
    assert values["b"] == pytest.approx([-0.225, -0.05, -0.05])
    assert all(v == 0 for item in scored for v, m in zip(item.advantages, item.sample.loss_mask) if not m)


def test_a_wasted_turn_scores_below_its_peers_even_when_every_episode_succeeds():
    fast = episode("fast", [(SYSTEM, 10), ([3], 11)], 1.0)
    slow = episode("slow", [(SYSTEM, 12), ([5], 13), ([3], 11)], 1.0)
    scored, stats = run([Group("g", [fast, slow])])
    assert stats["dropped_groups"] == 0  # GRPO would drop this group: both rewards are 1
    values = per_call(scored)
    assert values["fast"][0] > 0 > values["slow"][0]
    assert values["fast"][1] == values["slow"][2] == 0.0  # the shared state, both then won at once


def test_groups_with_no_signal_at_either_level_are_dropped_or_zero():
    same = [episode(s, [(SYSTEM, 10), ([3], 11)], 0.0) for s in ("a", "b")]
    scored, stats = run([Group("g", same)])
    assert (scored, stats["dropped_groups"]) == ([], 1)
    scored, stats = run([Group("g", same)], equal_rewards="zero")
    assert stats["dropped_groups"] == 0 and all(v == 0 for item in scored for v in item.advantages)


def test_equal_outcomes_drop_keeps_only_groups_that_were_both_won_and_lost():
    # every episode failed, one with a step penalty: signal at both levels, but none about winning
    lost = [episode("a", [(SYSTEM, 10)], 0.0), episode("b", [(SYSTEM, 11)], 0.0, {0: -0.1})]
    mixed = [episode("c", [(SYSTEM, 10)], 1.0), episode("d", [(SYSTEM, 11)], 0.0, {0: -0.1})]
    groups = [Group("lost", lost), Group("mixed", mixed)]
    scored, stats = run(groups)
    assert stats["dropped_groups"] == 0 and len(scored) == 4
    scored, stats = run(groups, equal_outcomes="drop")
    assert stats["dropped_groups"] == 1 and {item.sample.session_id for item in scored} == {"c", "d"}


def test_scaled_advantages_divide_each_level_by_its_std():
    a = episode("a", [(SYSTEM, 10)], 1.0)
    b = episode("b", [(SYSTEM, 11)], 0.0)
    values = per_call(run([Group("g", [a, b])], step_weight=0.5)[0])
    std = 2**-0.5  # sample std of (1, 0)
    expected = 0.5 / (std + 1e-6)
    assert values["a"] == pytest.approx([expected * 1.5]) and values["b"] == pytest.approx([-expected * 1.5])


def test_episode_steps_split_a_sample_at_each_call():
    sample = episode("a", [(SYSTEM, 10), ([3, 4], 11)], 2.0, {0: -1.0})
    steps = episode_steps(sample, 2.0, gamma=1.0)
    assert [s.anchor for s in steps] == [(1, 2), (3, 4)]
    assert [s.ret for s in steps] == [1.0, 2.0]


def test_bad_options_are_clear_errors():
    group = Group("g", [episode("a", [(SYSTEM, 10)], 1.0), episode("b", [(SYSTEM, 11)], 0.0)])
    with pytest.raises(AdvantageError, match="gamma"):
        run([group], gamma=1.5)
    with pytest.raises(AdvantageError, match="equal_rewards"):
        run([group], equal_rewards="keep")
    with pytest.raises(AdvantageError, match="equal_outcomes"):
        run([group], equal_outcomes="zero")
