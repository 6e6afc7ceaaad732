"""A child process of the multi-process trainer tests (TP=2 or DP=2 over gloo), and the value
head's part of the run, shared with the one-process run it is compared to."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def seed_value_head(policy: Any) -> None:
    """The same non-zero value head on every rank (a fresh one's zeros would agree anyway)."""
    import torch

    torch.nn.init.normal_(policy.critic.linear.weight, generator=torch.Generator().manual_seed(0))


def add_critic_targets(policy: Any, scored: list[Any]) -> None:
    """Each scored sample's values (the head's) and returns, so the step trains the head too."""
    from roost.trainer.critic import returns

    values = policy.values([item.sample for item in scored])
    for item, v in zip(scored, values):
        item.values, item.returns = v, returns(item.advantages, v, item.sample.loss_mask)


def run(rank: int, world: int, port: int, tp: int, checkpoint: str, out: str, distributed_optimizer: bool) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    from roost.tests.trainer.trainer_fixtures import agentic_batch, constrained_group, grpo_batch
    from roost.trainer.advantages import AdvantageConfig, Group, compute_advantages
    from roost.trainer.megatron import parallel
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig
    from roost.trainer.recipe import CriticSection

    store = torch.distributed.TCPStore("127.0.0.1", port, world, is_master=False)
    parallel.init(tp=tp, rank=rank, world_size=world, store=store)
    policy = MegatronPolicy(
        TrainConfig(
            checkpoint=checkpoint,
            lr=1e-3,
            token_budget=64,
            use_distributed_optimizer=distributed_optimizer,
            critic=CriticSection(lr=1e-2),
        )
    )
    seed_value_head(policy)
    probe = agentic_batch()
    logprobs = [lp.tolist() for lp in policy.logprobs(probe)]
    values = policy.values(probe)
    batch = grpo_batch(groups=2, size=4)
    groups = [Group("g0", batch[:4]), Group("g1", batch[4:]), Group("commands", constrained_group(checkpoint))]
    scored, _ = compute_advantages(groups, AdvantageConfig())
    add_critic_targets(policy, scored)
    stats = policy.train_step(scored)
    policy.export_hf(Path(out) / "ckpt")
    if rank == 0:
        (Path(out) / "result.json").write_text(
            json.dumps(
                {
                    "logprobs": logprobs,
                    "values": values,
                    "value_head": policy.critic.linear.weight.detach()[0].tolist(),
                    "loss": stats.loss,
                    "grad_norm": stats.grad_norm,
                    "info": vars(policy.info),
                    "microbatches": stats.microbatches,
                }
            )
        )
    parallel.shutdown()
