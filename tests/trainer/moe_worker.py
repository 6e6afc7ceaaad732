"""A child process of the parallel MoE tests (DP=2, EP=2 or TP=2, over gloo), and the run it is
compared to: the MoE policy's logprobs on a packed batch, some of it routed by recorded experts,
then one training step."""

from __future__ import annotations

import json
import os
from pathlib import Path

TOKEN_BUDGET = 32
"""Three groups of 2 samples (13 + 6 tokens, the prompt shared): a microbatch per group, so one
of two ranks runs two and the other one (and, under expert parallelism, one at zero weight). A
group's tree holds 25 tokens: split over two tensor-parallel ranks it is padded to 26."""
GROUPS = ("g0", "g1", "g2")


def forced_routing(num_tokens: int, moe) -> list[list[int]]:
    """Recorded experts (R3) that are not the routers' own choice: token t goes to experts
    (t + layer + 3k) mod E, k < top_k, in every layer; the last token has none, as an engine records."""
    rows = [
        [(t + layer + 3 * k) % moe.num_experts for layer in range(len(moe.layers)) for k in range(moe.top_k)]
        for t in range(num_tokens - 1)
    ]
    return [*rows, []]


def train_once(policy) -> dict:
    """Logprobs of a three-group batch, then one step on it; group g1's samples carry recorded
    experts (the policy replays them), the others are routed by the routers."""
    from roost.tests.trainer.trainer_fixtures import grpo_batch
    from roost.trainer.advantages import AdvantageConfig, Group, compute_advantages

    samples = grpo_batch(groups=len(GROUPS), size=2, prompt=13, answer=6)
    for k, sample in enumerate(samples):
        sample.reward = float(k % 2)  # no group ties: every group trains
        if sample.group_id == "g1":
            sample.routed_experts = forced_routing(len(sample.tokens), policy.spec.moe)
    logprobs = [lp.tolist() for lp in policy.logprobs(samples)]
    groups = [Group(g, [s for s in samples if s.group_id == g]) for g in GROUPS]
    scored, _ = compute_advantages(groups, AdvantageConfig())
    stats = policy.train_step(scored)
    return {"logprobs": logprobs, "loss": stats.loss, "microbatches": stats.microbatches}


def run(rank: int, world: int, port: int, tp: int, checkpoint: str, out: str, ep: int = 1) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    from roost.trainer.megatron import parallel
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    store = torch.distributed.TCPStore("127.0.0.1", port, world, is_master=False)
    parallel.init(tp=tp, ep=ep, rank=rank, world_size=world, store=store)
    policy = MegatronPolicy(TrainConfig(checkpoint=checkpoint, lr=1e-3, token_budget=TOKEN_BUDGET, routing_replay=True))
    result = train_once(policy)
    policy.export_hf(Path(out) / "ckpt")  # every expert, gathered from the ranks that hold them
    if rank == 0:
        (Path(out) / "result.json").write_text(json.dumps({**result, "info": vars(policy.info)}))
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
