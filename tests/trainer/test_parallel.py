"""Tensor parallel 2 and data parallel 2 over gloo on CPU train exactly like one process:
same logprobs, same loss, same updated weights (TRL-style invariant), on a batch with a group
held to a grammar (each tensor-parallel rank masks its own vocabulary shard); and the value head
alike: same values (the hidden state is whole on every tensor-parallel rank), same head after the
step (its gradients summed over the data-parallel ranks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from roost.tests.trainer import parallel_worker
from roost.trainer import hf_checkpoint

pytestmark = pytest.mark.slow


def launch(tmp_path: Path, tiny_model_path: Path, *, tp: int, distributed_optimizer: bool = False) -> dict:
    out = tmp_path / f"tp{tp}"
    out.mkdir()
    # the ranks meet on a store this process listens on, its port picked by the OS as it binds
    store = torch.distributed.TCPStore("127.0.0.1", 0, 2, is_master=True, wait_for_workers=False)
    args = (2, store.port, tp, str(tiny_model_path), str(out), distributed_optimizer)
    mp.start_processes(parallel_worker.run, args=args, nprocs=2, start_method="spawn", join=True)
    return json.loads((out / "result.json").read_text()) | {"weights": hf_checkpoint.read_weights(out / "ckpt")}


@pytest.fixture(scope="module")
def single_process(megatron_world, tiny_model_path, tmp_path_factory):
    from roost.tests.trainer.trainer_fixtures import agentic_batch, constrained_group, grpo_batch
    from roost.trainer.advantages import AdvantageConfig, Group, compute_advantages
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig
    from roost.trainer.recipe import CriticSection

    policy = MegatronPolicy(
        TrainConfig(checkpoint=str(tiny_model_path), lr=1e-3, token_budget=64, critic=CriticSection(lr=1e-2))
    )
    parallel_worker.seed_value_head(policy)
    logprobs = [lp.tolist() for lp in policy.logprobs(agentic_batch())]
    values = policy.values(agentic_batch())
    batch = grpo_batch(groups=2, size=4)
    # a group held to a grammar: trained over its allowed tokens, each rank masking its vocabulary shard
    groups = [Group("g0", batch[:4]), Group("g1", batch[4:]), Group("commands", constrained_group(tiny_model_path))]
    scored, _ = compute_advantages(groups, AdvantageConfig())
    parallel_worker.add_critic_targets(policy, scored)
    stats = policy.train_step(scored)
    assert stats.extra["allowed_mass"] < stats.extra["tokens"] - 1 and stats.extra["grammar_replay_failures"] == 0
    weights = policy.hf_state()
    initial = hf_checkpoint.read_weights(tiny_model_path)
    assert not torch.equal(weights["model.norm.weight"], initial["model.norm.weight"])  # the step did something
    return {
        "logprobs": logprobs,
        "loss": stats.loss,
        "weights": weights,
        "microbatches": stats.microbatches,
        "values": values,
        "value_head": policy.critic.linear.weight.detach()[0].tolist(),
    }


def assert_same_training(parallel_run: dict, single: dict) -> None:
    assert single["microbatches"] >= 2
    for key in ("logprobs", "values"):
        worst = max(abs(a - b) for x, y in zip(parallel_run[key], single[key]) for a, b in zip(x, y))
        assert worst <= 1e-5, key
    assert max(abs(a - b) for a, b in zip(parallel_run["value_head"], single["value_head"])) <= 2e-5
    assert parallel_run["loss"] == pytest.approx(single["loss"], rel=1e-5, abs=1e-7)
    assert parallel_run["weights"].keys() == single["weights"].keys()
    for name, tensor in single["weights"].items():
        torch.testing.assert_close(parallel_run["weights"][name], tensor, rtol=0, atol=2e-5, msg=name)


def test_tensor_parallel_2_trains_like_one_process(tmp_path, tiny_model_path, single_process):
    run = launch(tmp_path, tiny_model_path, tp=2)
    assert run["info"]["tp_size"] == 2 and run["info"]["dp_size"] == 1
    assert_same_training(run, single_process)


def test_data_parallel_2_with_distributed_optimizer_trains_like_one_process(tmp_path, tiny_model_path, single_process):
    run = launch(tmp_path, tiny_model_path, tp=1, distributed_optimizer=True)
    assert run["info"]["dp_size"] == 2
    assert_same_training(run, single_process)
