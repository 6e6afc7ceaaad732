"""Step-wise training: a sample per turn trains as the episode's path does under token_mean
(same loss, same gradient norm, same tree), and differently under seq_mean_token_mean."""

from __future__ import annotations

from pathlib import Path

import pytest

from roost.rollout.engine.tiny_model import resolve_model
from roost.tests.trainer.trainer_fixtures import agentic_batch
from roost.trainer.advantages import AdvantageConfig, EstimatorConfig, compute_advantages
from roost.trainer.losses import LossConfig
from roost.trainer.sample_sources import group_samples
from roost.trainer.step_wise import per_turn, turns_of


def scored_batch():
    scored, _ = compute_advantages(group_samples(agentic_batch()), AdvantageConfig(EstimatorConfig("grpo")))
    return scored


def test_each_turn_is_a_prefix_trained_on_its_own_reply():
    scored = scored_batch()
    assert [t.sample.tokens for t in per_turn(scored)] == [t.sample.tokens for item in scored for t in turns_of(item)]
    for item in scored:
        sample, mine = item.sample, turns_of(item)
        assert len(mine) == len(sample.spans()) >= 2  # planner paths have three turns, solvers two
        covered = [0] * len(sample.tokens)
        for turn in mine:
            assert turn.sample.tokens == sample.tokens[: len(turn.sample.tokens)]
            calls = {c for c, m in zip(turn.sample.token_call, turn.sample.loss_mask) if m}
            assert len(calls) == 1  # one reply
            assert turn.sample.loss_mask[-1] == 1  # the turn ends with its reply
            for i, m in enumerate(turn.sample.loss_mask):
                covered[i] += m
                assert turn.advantages[i] == (item.advantages[i] if m else 0.0)
        assert covered == sample.loss_mask  # every sampled token in exactly one turn
        assert mine[-1].sample.tokens == sample.tokens


@pytest.fixture(scope="module")
def policies(megatron_world, tiny_model_path):
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    def policy(aggregation: str):
        loss = LossConfig(kind="grpo", aggregation=aggregation)
        return MegatronPolicy(TrainConfig(checkpoint=str(tiny_model_path), lr=1e-3, token_budget=256, loss=loss))

    return policy


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean"])
def test_step_wise_trains_as_episodes_exactly_where_it_must(policies, aggregation):
    scored = scored_batch()
    episodes, turns = policies(aggregation), policies(aggregation)
    whole, stepwise = episodes.train_step(scored), turns.train_step(per_turn(scored))
    assert stepwise.samples > whole.samples and stepwise.sampled_tokens == whole.sampled_tokens
    assert stepwise.tree_tokens == whole.tree_tokens  # a path's turns pack into the path itself
    if aggregation == "token_mean":
        assert stepwise.loss == pytest.approx(whole.loss, rel=1e-5, abs=1e-7)
        assert stepwise.grad_norm == pytest.approx(whole.grad_norm, rel=1e-5)
    else:  # each turn is averaged alone: another weighting of the same tokens
        assert stepwise.grad_norm != pytest.approx(whole.grad_norm, rel=1e-3)


def test_a_sample_with_images_is_refused_by_name():
    from dataclasses import replace

    from roost.trainer.step_wise import StepWiseError

    item = scored_batch()[0]
    with pytest.raises(StepWiseError, match="step_wise: false"):
        per_turn([replace(item, sample=replace(item.sample, images=["ab" * 32]))])


def test_step_wise_training_of_a_model_seeing_screenshots_is_refused_before_the_run_starts():
    from roost.trainer.recipe import RecipeError, load_recipe
    from roost.trainer.rl.loop import check_step_wise_model

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "osworld" / "cpu_vision.yaml"
    vision = str(resolve_model("tiny-vl"))
    check_step_wise_model(load_recipe(recipe), vision)
    with pytest.raises(RecipeError, match="step-wise training does not cut into turns yet"):
        check_step_wise_model(load_recipe(recipe, ["algorithm.step_wise=true"]), vision)
    check_step_wise_model(load_recipe(recipe, ["algorithm.step_wise=true"]), str(resolve_model("tiny")))
