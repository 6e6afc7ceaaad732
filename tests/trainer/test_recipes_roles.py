"""The alfworld recipes that add a role or a critic to the CPU recipe: two RL steps of each,
through the real env server, gateway, embedded engines and trainer, cut to the sizes
`test_recipes_run` uses (in a file of their own so they run beside those runs)."""

from __future__ import annotations

import pytest

from roost.tests.trainer.test_recipes_run import COMMON, RECIPES, SHORT, rl_metrics
from roost.tests.trainer.test_rl_loop import local_ray  # noqa: F401 (a fixture)
from roost.trainer.recipe import load_recipe

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_the_distillation_recipe_trains_two_steps_on_its_teachers_scores(tmp_path, local_ray):  # noqa: F811
    from roost.trainer.rl.loop import train

    run_dir = tmp_path / "run"
    overrides = ["steps=2", f"output_dir={run_dir}", *COMMON, *SHORT["alfworld"]]
    summary = train(load_recipe(RECIPES / "alfworld" / "opd.yaml", overrides))
    assert summary.steps == 2
    rl = rl_metrics(run_dir)
    assert all(m["updated"] and m["trained_samples"] > 0 and m["teacher_failed"] == 0 for m in rl), rl
    # the teacher is the policy RL started from: at the first step the student is the same
    # weights, sampled by another engine, so its reverse KL is ~0; then the student moves
    assert abs(rl[0]["distill_reverse_kl"]) < 1e-3, rl
    assert rl[1]["distill_reverse_kl"] != rl[0]["distill_reverse_kl"]
    assert (run_dir / "logs" / "teacher-strong.log").is_file()


def test_the_ppo_critic_recipe_warms_its_critic_up_then_trains_both(tmp_path, local_ray):  # noqa: F811
    """Two steps of recipes/alfworld/ppo_critic.yaml: the first trains the value head alone (its
    warm-up), the second the policy and the head on GAE over the head's values."""
    from roost.trainer.rl.loop import train

    run_dir = tmp_path / "run"
    short = [o for o in SHORT["alfworld"] if not o.startswith("algorithm.advantage.options")]  # grpo's option
    overrides = ["steps=2", f"output_dir={run_dir}", *COMMON, *short]
    summary = train(load_recipe(RECIPES / "alfworld" / "ppo_critic.yaml", overrides))
    assert summary.steps == 2
    rl = rl_metrics(run_dir)
    assert [m["updated"] for m in rl] == [False, True], rl
    assert all(m["trained_samples"] > 0 and m["value_loss"] > 0 for m in rl), rl
    assert rl[0]["value_mean"] == 0.0  # a fresh head: every value 0 until it trains
    import torch

    state = torch.load(run_dir / "checkpoints" / "step-2" / "trainer" / "rank-0.pt", weights_only=False)
    assert state["critic"]["linear"]["weight"].abs().sum() > 0
