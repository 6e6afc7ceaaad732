"""A child process of the vision-language TP/DP test (`test_vision_parallel.py`): `MegatronPolicy`
on `tiny-vl` over gloo, scoring and training the image batch of `vision_batch.py`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

TOKEN_BUDGET = 40
"""The three replies sharing one image in one microbatch, the fourth sample (another image) in a
second: data-parallel rank r trains microbatch r."""


def train_once(policy: Any, checkpoint: str) -> dict[str, Any]:
    """The batch's logprobs before the step, then one GRPO step: what the runs compare. The
    samples are packed by image (their group ids), their advantages those of one group."""
    from roost.tests.trainer.vision_batch import SEEN, image_group, policy_samples
    from roost.trainer.advantages import AdvantageConfig, Group, compute_advantages

    samples, images = policy_samples(image_group(Path(checkpoint)))
    for sample, sha in zip(samples, SEEN):
        sample.group_id = sha
    policy.use_images(images)
    logprobs = [lp.tolist() for lp in policy.logprobs(samples)]
    scored, _ = compute_advantages([Group("g", samples)], AdvantageConfig())
    stats = policy.train_step(scored)
    return {
        "logprobs": logprobs,
        "loss": stats.loss,
        "microbatches": stats.microbatches,
    }


def run(rank: int, world: int, port: int, tp: int, checkpoint: str, out: str) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    from roost.trainer.megatron import parallel
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    store = torch.distributed.TCPStore("127.0.0.1", port, world, is_master=False)
    parallel.init(tp=tp, rank=rank, world_size=world, store=store)
    config = TrainConfig(checkpoint=checkpoint, token_budget=TOKEN_BUDGET, lr=1e-2, freeze_vision_tower=False)
    policy = MegatronPolicy(config)
    result = train_once(policy, checkpoint)
    policy.export_hf(Path(out) / "ckpt")
    if rank == 0:
        (Path(out) / "result.json").write_text(json.dumps({**result, "info": vars(policy.info)}))
    parallel.shutdown()
