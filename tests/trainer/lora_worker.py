"""A child process of the LoRA TP=2 / DP=2 tests: the adapters of `test_lora.random_adapter`, one
RL step on the batch of `test_parallel`, and what it gives (logprobs, loss, gradients, weights)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def lora_step(policy) -> dict:
    """Logprobs of a probe batch, then one GRPO step; plain data and PEFT-keyed tensors."""
    from roost.tests.trainer.test_lora import random_adapter
    from roost.tests.trainer.trainer_fixtures import agentic_batch, constrained_group, grpo_batch
    from roost.trainer.advantages import AdvantageConfig, Group, compute_advantages
    from roost.trainer.megatron import lora

    random_adapter(policy)
    logprobs = [lp.tolist() for lp in policy.logprobs(agentic_batch())]
    batch = grpo_batch(groups=2, size=4)
    groups = [Group("g0", batch[:4]), Group("g1", batch[4:]), Group("commands", constrained_group(policy.source))]
    scored, _ = compute_advantages(groups, AdvantageConfig())
    stats = policy.train_step(scored)
    grads = lora.gather_weights(policy.model, policy.lora_hosts, tp_size=policy.info.tp_size, grads=True)
    return {
        "logprobs": logprobs,
        "loss": stats.loss,
        "grad_norm": stats.grad_norm,
        "microbatches": stats.microbatches,
        "grads": grads,
        "adapter": policy.adapter_state(),
    }


def run(rank: int, world: int, port: int, tp: int, checkpoint: str, out: str) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    from roost.tests.trainer.test_lora import ALL
    from roost.trainer.megatron import parallel
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    store = torch.distributed.TCPStore("127.0.0.1", port, world, is_master=False)
    parallel.init(tp=tp, rank=rank, world_size=world, store=store)
    policy = MegatronPolicy(TrainConfig(checkpoint=checkpoint, lr=1e-3, token_budget=64, lora=ALL))
    result = lora_step(policy)
    policy.save_adapter(Path(out) / "adapter")
    policy.export_hf(Path(out) / "merged")
    if rank == 0:
        torch.save({k: result.pop(k) for k in ("grads", "adapter")}, Path(out) / "tensors.pt")
        (Path(out) / "result.json").write_text(json.dumps({**result, "info": vars(policy.info)}))
    parallel.shutdown()
