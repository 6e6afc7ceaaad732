"""SFT → RL in one run: after `reset_optimizer` the policy trains exactly like a new run started
from the SFT weights (TRL-style invariant: two configurations that must train the same)."""

from __future__ import annotations

import copy

import pytest
import torch

from roost.tests.trainer.trainer_fixtures import grpo_batch
from roost.trainer.advantages import AdvantageConfig, Group, compute_advantages
from roost.trainer.megatron.train import MegatronPolicy, TrainConfig


def _scored(seed: int) -> list:
    batch = grpo_batch(seed=seed, groups=2, size=4)
    scored, _ = compute_advantages([Group("g0", batch[:4]), Group("g1", batch[4:])], AdvantageConfig())
    return scored


def _policy(checkpoint, distributed: bool) -> MegatronPolicy:
    return MegatronPolicy(
        TrainConfig(checkpoint=str(checkpoint), lr=1e-3, token_budget=512, use_distributed_optimizer=distributed)
    )


@pytest.mark.parametrize("distributed", [False, True], ids=["optimizer", "distributed-optimizer"])
def test_a_reset_optimizer_trains_like_a_new_run_from_the_same_weights(
    megatron_world, tiny_model_path, tmp_path, distributed
):
    first, second = _scored(seed=1), _scored(seed=2)

    one_run = _policy(tiny_model_path, distributed)
    one_run.train_step(first)
    one_run.train_step(first)
    handed_over = one_run.export_hf(tmp_path / "after-first")
    moments = copy.deepcopy(one_run.optimizer.state_dict())
    one_run.reset_optimizer()
    one_run.train_step(second)

    new_run = _policy(handed_over, distributed)
    new_run.train_step(second)

    kept_moments = _policy(handed_over, distributed)
    kept_moments.optimizer.load_state_dict(moments)
    kept_moments.train_step(second)

    reset, fresh, carried = one_run.hf_state(), new_run.hf_state(), kept_moments.hf_state()
    for name, tensor in fresh.items():
        torch.testing.assert_close(reset[name], tensor, rtol=0, atol=1e-6, msg=name)
    assert any(not torch.allclose(carried[name], fresh[name], rtol=0, atol=1e-6) for name in fresh)
