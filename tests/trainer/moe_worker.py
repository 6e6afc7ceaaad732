"""A child process of the data-parallel MoE test (DP=2 over gloo), and the run it is compared to:
the MoE policy's logprobs on a packed batch, then one training step."""

from __future__ import annotations

import json
import os
from pathlib import Path

TOKEN_BUDGET = 32
"""Two groups of 2 samples (12 + 6 tokens, the prompt shared): a microbatch per group."""


def train_once(policy) -> dict:
    """Logprobs of a two-group batch, one step on it, and a router's first row after the step."""
    from roost.tests.trainer.trainer_fixtures import grpo_batch
    from roost.trainer.advantages import AdvantageConfig, Group, compute_advantages

    samples = grpo_batch(groups=2, size=2, prompt=12, answer=6)
    for k, sample in enumerate(samples):
        sample.reward = float(k % 2)  # no group ties: both groups train
    logprobs = [lp.tolist() for lp in policy.logprobs(samples)]
    groups = [Group(g, [s for s in samples if s.group_id == g]) for g in ("g0", "g1")]
    scored, _ = compute_advantages(groups, AdvantageConfig())
    stats = policy.train_step(scored)
    router = policy.hf_state()["model.layers.0.mlp.gate.weight"][0].tolist()
    return {"logprobs": logprobs, "loss": stats.loss, "microbatches": stats.microbatches, "router": router}


def run(rank: int, world: int, port: int, tp: int, checkpoint: str, out: str) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    from roost.trainer.megatron import parallel
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    store = torch.distributed.TCPStore("127.0.0.1", port, world, is_master=False)
    parallel.init(tp=tp, rank=rank, world_size=world, store=store)
    result = train_once(MegatronPolicy(TrainConfig(checkpoint=checkpoint, lr=1e-3, token_budget=TOKEN_BUDGET)))
    if rank == 0:
        (Path(out) / "result.json").write_text(json.dumps(result))
    parallel.shutdown()


def run_expert_parallel(rank: int, world: int, port: int, checkpoint: str, out: str) -> None:
    """EP=2: each rank holds half the experts (`convert.expert_parallel_slice`) and the tokens
    cross ranks through Megatron's all-to-all dispatcher; rank 0 writes the packed batch's logprobs."""
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    from roost.rollout.engine.model_spec import ModelSpec
    from roost.rollout.engine.rope import inverse_frequencies
    from roost.tests.trainer.trainer_fixtures import grpo_batch
    from roost.trainer import hf_checkpoint
    from roost.trainer.megatron import convert, parallel
    from roost.trainer.megatron.model import build_gpt_model, scored_logprobs, transformer_config
    from roost.trainer.prefix_tree import tree_microbatch

    store = torch.distributed.TCPStore("127.0.0.1", port, world, is_master=False)
    parallel.init(tp=1, ep=world, rank=rank, world_size=world, store=store)
    spec = ModelSpec.from_folder(checkpoint)
    model = build_gpt_model(spec, transformer_config(spec, expert_model_parallel_size=world), "sdpa")
    whole = convert.hf_to_megatron(hf_checkpoint.read_weights(checkpoint), spec)
    convert.load_into(model, convert.expert_parallel_slice(whole, spec, ep_rank=rank, ep_size=world))
    samples = grpo_batch(groups=1, size=3, prompt=12, answer=6)
    scored = [[i for i, m in enumerate(s.loss_mask) if m] for s in samples]
    microbatch = tree_microbatch([s.tokens for s in samples], scored, range(len(samples)))
    with torch.no_grad():
        logprobs = microbatch.sample_logprobs(scored_logprobs(model, microbatch, inverse_frequencies(spec)))
    if rank == 0:
        (Path(out) / "result.json").write_text(json.dumps([lp.tolist() for lp in logprobs]))
    parallel.shutdown()
