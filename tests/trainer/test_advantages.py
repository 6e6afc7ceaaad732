"""Advantage estimators: values, options, custom hooks by dotted path, posted advantages,
per-agent estimators and bad input."""

from __future__ import annotations

import math
import sys
import types

import pytest

from roost.rollout.store.samples import CallRef, SampleError
from roost.tests.trainer.trainer_fixtures import agentic_batch, make_sample
from roost.trainer.advantages import (
    AdvantageConfig,
    AdvantageError,
    EstimatorConfig,
    Group,
    compute_advantages,
)


def group_of(rewards, group="g", agent="main"):
    return Group(
        group,
        [
            make_sample([1, 2, 3, 4], [0, 0, 1, 1], reward=r, session=f"s{i}", group=group, agent=agent)
            for i, r in enumerate(rewards)
        ],
    )


def scalar(item):
    values = {a for a, m in zip(item.advantages, item.sample.loss_mask) if m}
    assert len(values) == 1 and all(a == 0 for a, m in zip(item.advantages, item.sample.loss_mask) if not m)
    return values.pop()


def run(groups, name="grpo", **options):
    return compute_advantages(groups, AdvantageConfig(default=EstimatorConfig(name, options)))


def test_grpo_normalises_by_group_mean_and_std():
    scored, stats = run([group_of([0.0, 1.0, 2.0, 5.0])])
    rewards = [0.0, 1.0, 2.0, 5.0]
    mean = sum(rewards) / 4
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / 3)
    assert [scalar(s) for s in scored] == pytest.approx([(r - mean) / (std + 1e-6) for r in rewards])
    assert stats == {"groups": 1, "dropped_groups": 0, "samples": 4}


def test_grpo_without_scaling_only_centres():
    scored, _ = run([group_of([0.0, 1.0, 2.0])], scale=False)
    assert [scalar(s) for s in scored] == pytest.approx([-1.0, 0.0, 1.0])


def test_equal_rewards_drop_the_group_by_default_or_give_zeros():
    scored, stats = run([group_of([1.0, 1.0, 1.0]), group_of([0.0, 1.0], group="h")])
    assert stats["dropped_groups"] == 1 and {s.sample.group_id for s in scored} == {"h"}
    scored, stats = run([group_of([1.0, 1.0])], equal_rewards="zero")
    assert stats["dropped_groups"] == 0 and [scalar(s) for s in scored] == [0.0, 0.0]


def test_rloo_uses_leave_one_out_baseline():
    scored, _ = run([group_of([1.0, 2.0, 6.0])], "rloo")
    assert [scalar(s) for s in scored] == pytest.approx([1 - 4, 2 - 3.5, 6 - 1.5])


def test_reinforce_pp_whitens_over_the_whole_batch():
    scored, _ = run([group_of([0.0, 1.0]), group_of([0.0, 3.0], group="h")], "reinforce++")
    values = [a for s in scored for a, m in zip(s.advantages, s.sample.loss_mask) if m]
    assert sum(values) == pytest.approx(0.0, abs=1e-9)
    assert math.sqrt(sum(v * v for v in values) / (len(values) - 1)) == pytest.approx(1.0, rel=1e-4)


def test_gae_with_a_critic():
    module = types.ModuleType("roost_test_critic")
    module.constant = lambda samples: [[0.5] * len(s.tokens) for s in samples]
    sys.modules["roost_test_critic"] = module
    scored, _ = run([group_of([1.0])], "gae", critic="roost_test_critic:constant", gamma=1.0, lam=1.0)
    # two sampled tokens, values 0.5, reward 1 at the end: A_t = 1 - V(s_t)
    assert scored[0].advantages == pytest.approx([0, 0, 0.5, 0.5])
    scored, _ = run([group_of([1.0])], "gae", critic=module.constant, gamma=1.0, lam=0.0)
    assert scored[0].advantages == pytest.approx([0, 0, 0.0, 0.5])


def hook_module():
    module = types.ModuleType("roost_test_hooks")
    module.per_agent = lambda group: {(s.session_id, s.agent_id): 2.0 for s in group.samples}
    module.per_call = lambda group: {c.call_id: float(i) for s in group.samples for i, c in enumerate(s.calls)}
    module.per_token = lambda group: [[0.1 * i for i in range(len(s.tokens))] for s in group.samples]
    module.drop = lambda group: None
    module.with_option = lambda group, bonus: {(s.session_id, s.agent_id): bonus for s in group.samples}
    sys.modules["roost_test_hooks"] = module
    return module


@pytest.mark.parametrize("hook", ["per_agent", "per_call", "per_token", "drop", "with_option"])
def test_custom_hook_by_dotted_path(hook):
    hook_module()
    options = {"bonus": 7.0} if hook == "with_option" else {}
    scored, stats = run([group_of([0.0, 1.0])], f"roost_test_hooks:{hook}", **options)
    if hook == "drop":
        assert scored == [] and stats["dropped_groups"] == 1
        return
    expected = {
        "per_agent": [0, 0, 2, 2],
        "per_call": [0, 0, 0, 0],
        "per_token": [0, 0, 0.2, 0.3],
        "with_option": [0, 0, 7, 7],
    }[hook]
    assert scored[0].advantages == pytest.approx(expected)


def test_multi_call_per_call_advantages():
    hook_module()
    samples = agentic_batch()
    scored, _ = run([Group("agentic", samples)], "roost_test_hooks.per_call")
    first = scored[0]
    for a, m, c in zip(first.advantages, first.sample.loss_mask, first.sample.token_call):
        assert a == (float(c) if m else 0.0)


def test_each_agent_may_use_its_own_estimator():
    hook_module()
    samples = agentic_batch()
    config = AdvantageConfig(
        default=EstimatorConfig("grpo"), per_agent={"solver": EstimatorConfig("roost_test_hooks:per_agent")}
    )
    scored, _ = compute_advantages([Group("agentic", samples)], config)
    solver = [s for s in scored if s.sample.agent_id == "solver"]
    planner = [s for s in scored if s.sample.agent_id == "planner"]
    assert {scalar(s) for s in solver} == {2.0}
    assert sorted({round(scalar(s), 6) for s in planner}) == pytest.approx([-0.707106, 0.707106], abs=1e-5)


def test_posted_advantages_take_precedence():
    posted_token = make_sample([1, 2, 3, 4], [0, 0, 1, 1], reward=0.0, session="a", advantages=[0, 0, 5.0, 6.0])
    posted_call = make_sample(
        [1, 2, 3, 4], [0, 0, 1, 1], reward=1.0, session="b", calls=[CallRef("b/main/0", "0", advantage=-3.0)]
    )
    plain = make_sample([1, 2, 3, 4], [0, 0, 1, 1], reward=2.0, session="c")
    scored, _ = run([Group("g", [posted_token, posted_call, plain])])
    assert scored[0].advantages == [0, 0, 5.0, 6.0]
    assert scored[1].advantages == [0, 0, -3.0, -3.0]
    assert scalar(scored[2]) == pytest.approx(1.0, rel=1e-5)  # grpo over rewards 0, 1, 2


def test_fully_posted_groups_need_no_reward():
    sample = make_sample([1, 2, 3], [0, 1, 1], reward=None, advantages=[0, 1.5, 1.5])
    scored, _ = run([Group("g", [sample])])
    assert scored[0].advantages == [0, 1.5, 1.5]


def test_bad_input_is_a_clear_error():
    with pytest.raises(AdvantageError, match="empty"):
        run([Group("g", [])])
    with pytest.raises(SampleError, match="reward is nan"):
        run([group_of([1.0, float("nan")])])
    with pytest.raises(AdvantageError, match="has no reward"):
        run([group_of([1.0, None])])
    branches = [make_sample([1, 2, 3], [0, 1, 1], reward=r, session="s") for r in (0.0, 1.0)]
    with pytest.raises(AdvantageError, match="branches with different rewards"):
        run([Group("g", branches)])
    with pytest.raises(AdvantageError, match="cannot load"):
        run([group_of([1.0, 2.0])], "no_such_module:fn")
    hook_module()
    sys.modules["roost_test_hooks"].bad = lambda group: [[1.0]] * len(group.samples)
    with pytest.raises(AdvantageError, match="advantages for a sample of 4 tokens"):
        run([group_of([1.0, 2.0])], "roost_test_hooks:bad")
