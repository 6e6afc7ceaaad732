"""A child process of the multi-process trainer tests (TP=2 or DP=2 over gloo)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def run(rank: int, world: int, port: int, tp: int, checkpoint: str, out: str, distributed_optimizer: bool) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    from roost.tests.trainer.trainer_fixtures import agentic_batch, constrained_group, grpo_batch
    from roost.trainer.advantages import AdvantageConfig, Group, compute_advantages
    from roost.trainer.megatron import parallel
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    store = torch.distributed.TCPStore("127.0.0.1", port, world, is_master=False)
    parallel.init(tp=tp, rank=rank, world_size=world, store=store)
    policy = MegatronPolicy(
        TrainConfig(checkpoint=checkpoint, lr=1e-3, token_budget=64, use_distributed_optimizer=distributed_optimizer)
    )
    probe = agentic_batch()
    logprobs = [lp.tolist() for lp in policy.logprobs(probe)]
    batch = grpo_batch(groups=2, size=4)
    groups = [Group("g0", batch[:4]), Group("g1", batch[4:]), Group("commands", constrained_group(checkpoint))]
    scored, _ = compute_advantages(groups, AdvantageConfig())
    stats = policy.train_step(scored)
    policy.export_hf(Path(out) / "ckpt")
    if rank == 0:
        (Path(out) / "result.json").write_text(
            json.dumps(
                {
                    "logprobs": logprobs,
                    "loss": stats.loss,
                    "grad_norm": stats.grad_norm,
                    "info": vars(policy.info),
                    "microbatches": stats.microbatches,
                }
            )
        )
    parallel.shutdown()
