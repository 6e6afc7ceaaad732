"""Step-wise training: a sample per turn trains as the episode's path does under token_mean
(same loss, same gradient norm, same tree), and differently under seq_mean_token_mean; a
vision-language model's turns each keep the images of their own tokens."""

from __future__ import annotations

import pytest

from roost.rollout.engine.model_spec import ModelSpec
from roost.rollout.engine.tiny_model import tiny_model_dir
from roost.tests.trainer.trainer_fixtures import agentic_batch
from roost.tests.trainer.vision_batch import two_turn_samples
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


def test_a_turn_keeps_the_images_of_its_tokens_and_trains_as_the_episode_does(megatron_world):
    """tiny-vl: two episodes whose turns each ask about an image of their own; cutting them needs
    the model's image token id, each turn names the images in its own tokens, and under
    token_mean the turns train as the episodes do."""
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig
    from roost.trainer.step_wise import StepWiseError

    vl = tiny_model_dir(variant="tiny-vl")
    samples, images = two_turn_samples(vl)
    scored, _ = compute_advantages(group_samples(samples), AdvantageConfig(EstimatorConfig("grpo")))
    with pytest.raises(StepWiseError, match="image token id"):
        per_turn(scored)
    turns = per_turn(scored, ModelSpec.from_folder(vl).vision.image_token_id)
    first, both = samples[0].images[:1], samples[0].images
    assert [t.sample.images for t in turns] == [first, both, first, both]

    def policy():
        loss = LossConfig(kind="grpo", aggregation="token_mean")
        trainer = MegatronPolicy(TrainConfig(checkpoint=str(vl), lr=1e-3, token_budget=256, loss=loss))
        trainer.use_images(images)
        return trainer

    whole, stepwise = policy().train_step(scored), policy().train_step(turns)
    assert (stepwise.samples, whole.samples) == (4, 2) and stepwise.tree_tokens == whole.tree_tokens
    assert stepwise.loss == pytest.approx(whole.loss, rel=1e-5, abs=1e-7)
    assert stepwise.grad_norm == pytest.approx(whole.grad_norm, rel=1e-5) and whole.grad_norm > 0
