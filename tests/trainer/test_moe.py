"""Megatron MoE training on the tiny Qwen3-MoE (`tiny-moe`): exact Hugging Face ⇄ Megatron
conversion of the router and experts, and the trainer's logprobs on a packed batch equal to
transformers' `Qwen3MoeForCausalLM`; a training step that moves routers and experts, and its
DP=2 and EP=2 runs over gloo equal to one process's; an EP=2 forward over gloo equal to transformers'."""

from __future__ import annotations

import json

import pytest
import torch
import torch.multiprocessing as mp

from roost.rollout.engine.model_spec import ModelSpec
from roost.rollout.engine.rope import inverse_frequencies
from roost.rollout.engine.tiny_model import tiny_model_dir
from roost.tests.trainer import moe_worker
from roost.tests.trainer.trainer_fixtures import grpo_batch
from roost.trainer import hf_checkpoint
from roost.trainer.megatron import convert
from roost.trainer.megatron.model import build_gpt_model, scored_logprobs, transformer_config
from roost.trainer.prefix_tree import tree_microbatch


@pytest.fixture(scope="module")
def moe_path():
    return tiny_model_dir(variant="tiny-moe")


@pytest.fixture(scope="module")
def hf_moe(moe_path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(moe_path, dtype=torch.float32).eval()


@pytest.mark.parametrize("tp", [1, 2])
def test_moe_round_trip_is_exact(moe_path, tp):
    spec = ModelSpec.from_folder(moe_path)
    hf = hf_checkpoint.read_weights(moe_path)
    shards = [convert.hf_to_megatron(hf, spec, tp_rank=r, tp_size=tp) for r in range(tp)]
    assert "decoder.layers.1.mlp.experts.local_experts.7.linear_fc2.weight" in shards[0]
    back = convert.megatron_to_hf(shards, spec)
    assert back.keys() == hf.keys()
    assert all(torch.equal(back[k], hf[k]) for k in hf)


def test_expert_parallel_slices_merge_back_exactly(moe_path):
    spec = ModelSpec.from_folder(moe_path)
    whole = convert.hf_to_megatron(hf_checkpoint.read_weights(moe_path), spec)
    slices = [convert.expert_parallel_slice(whole, spec, ep_rank=r, ep_size=2) for r in range(2)]
    name = "decoder.layers.0.mlp.experts.local_experts.{}.linear_fc1.weight"
    assert name.format(4) not in slices[1] and torch.equal(slices[1][name.format(0)], whole[name.format(4)])
    merged = convert.merge_expert_parallel(slices, spec)
    assert merged.keys() == whole.keys() and all(torch.equal(merged[k], whole[k]) for k in whole)
    with pytest.raises(ValueError, match="8 experts do not split over expert-parallel size 3"):
        convert.expert_parallel_slice(whole, spec, ep_rank=0, ep_size=3)


def test_moe_logprobs_on_a_packed_batch_equal_transformers(megatron_world, moe_path, hf_moe):
    spec = ModelSpec.from_folder(moe_path)
    model = build_gpt_model(spec, transformer_config(spec), "sdpa")
    convert.load_into(model, convert.hf_to_megatron(hf_checkpoint.read_weights(moe_path), spec))
    assert type(model.decoder.layers[0].mlp).__name__ == "MoELayer"
    samples = grpo_batch(groups=1, size=3, prompt=12, answer=6)
    scored = [[i for i, m in enumerate(s.loss_mask) if m] for s in samples]
    mb = tree_microbatch([s.tokens for s in samples], scored, list(range(len(samples))))
    assert mb.num_tokens < sum(len(s.tokens) for s in samples)  # the prompt is packed once
    with torch.no_grad():
        ours = mb.sample_logprobs(scored_logprobs(model, mb, inverse_frequencies(spec)))
        for sample, positions, lp in zip(samples, scored, ours):
            logits = hf_moe(torch.tensor([sample.tokens])).logits[0]
            ref = torch.log_softmax(logits, -1)[torch.tensor(positions) - 1, torch.tensor(sample.tokens)[positions]]
            assert float((lp - ref).abs().max()) <= 1e-4


def test_moe_policy_trains_and_exports_the_experts(megatron_world, moe_path, tmp_path):
    from roost.trainer.advantages import AdvantageConfig, Group, compute_advantages
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    policy = MegatronPolicy(TrainConfig(checkpoint=str(moe_path), lr=1e-3, token_budget=256))
    samples = grpo_batch(groups=1, size=4, prompt=12, answer=6)
    scored, _ = compute_advantages([Group("g0", samples)], AdvantageConfig())
    start = policy.hf_state()
    stats = policy.train_step(scored)
    assert stats.updated and stats.grad_norm > 0
    moved = policy.hf_state()
    assert moved.keys() == start.keys()
    for name in ("model.layers.0.mlp.gate.weight", "model.layers.1.mlp.experts.3.down_proj.weight"):
        assert not torch.equal(moved[name], start[name]), name
    out = policy.export_hf(tmp_path / "step-1")
    assert ModelSpec.from_folder(out).moe == policy.spec.moe


@pytest.fixture(scope="module")
def moe_single_process(megatron_world, moe_path):
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    config = TrainConfig(checkpoint=str(moe_path), lr=1e-3, token_budget=moe_worker.TOKEN_BUDGET, routing_replay=True)
    policy = MegatronPolicy(config)
    single = moe_worker.train_once(policy)
    assert single["microbatches"] == 3
    return single | {"weights": policy.hf_state()}


@pytest.mark.slow
@pytest.mark.parametrize(("tp", "ep"), [(1, 1), (1, 2), (2, 1)], ids=["dp2", "ep2", "tp2"])
def test_moe_data_expert_and_tensor_parallel_2_train_like_one_process(moe_path, moe_single_process, tmp_path, tp, ep):
    """DP=2 over gloo, each rank every expert; EP=2, each rank half the experts (loaded as its
    slice, tokens exchanged by Megatron's all-to-all, the rank with fewer microbatches running one
    at zero weight so every all-to-all has both ranks, the export gathering every expert); TP=2,
    each rank half of every weight, experts included, with the sequence split between the ranks
    (Megatron's MoE layer trains under tensor parallelism only so: each rank routes its half of the
    packed rows, padded to an even count). All three give the same logprobs, loss and updated
    weights as one process."""
    store = torch.distributed.TCPStore("127.0.0.1", 0, 2, is_master=True, wait_for_workers=False)
    args = (2, store.port, tp, str(moe_path), str(tmp_path), ep)
    mp.start_processes(moe_worker.run, args=args, nprocs=2, start_method="spawn", join=True)
    parallel = json.loads((tmp_path / "result.json").read_text())
    assert (parallel["info"]["tp_size"], parallel["info"]["dp_size"], parallel["info"]["ep_size"]) == (tp, 2 // tp, ep)
    single = moe_single_process
    worst = max(abs(a - b) for x, y in zip(parallel["logprobs"], single["logprobs"]) for a, b in zip(x, y))
    assert worst <= 1e-5
    assert parallel["loss"] == pytest.approx(single["loss"], rel=1e-5, abs=1e-7)
    weights = hf_checkpoint.read_weights(tmp_path / "ckpt")
    assert weights.keys() == single["weights"].keys()
    for name, tensor in single["weights"].items():
        torch.testing.assert_close(weights[name], tensor, rtol=0, atol=2e-5, msg=name)


@pytest.mark.slow
def test_moe_expert_parallel_2_forward_equals_transformers(moe_path, hf_moe, tmp_path):
    """EP=2 over gloo: half the experts a rank, tokens exchanged by Megatron's all-to-all (the
    policy itself trains with EP=1)."""
    store = torch.distributed.TCPStore("127.0.0.1", 0, 2, is_master=True, wait_for_workers=False)
    args = (2, store.port, str(moe_path), str(tmp_path))
    mp.start_processes(moe_worker.run_expert_parallel, args=args, nprocs=2, start_method="spawn", join=True)
    logprobs = json.loads((tmp_path / "result.json").read_text())
    samples = grpo_batch(groups=1, size=3, prompt=12, answer=6)
    with torch.no_grad():
        for sample, lp in zip(samples, logprobs):
            positions = torch.tensor([i for i, m in enumerate(sample.loss_mask) if m])
            logits = hf_moe(torch.tensor([sample.tokens])).logits[0]
            ref = torch.log_softmax(logits, -1)[positions - 1, torch.tensor(sample.tokens)[positions]]
            assert float((torch.tensor(lp) - ref).abs().max()) <= 1e-4


def engine_routing(hf_moe, samples) -> list[torch.Tensor]:
    """What a recording engine does (its logprobs equal transformers', test_engine_moe.py): each
    sample gets every token's top-2 experts per layer; returns the sampled tokens' logprobs."""
    logprobs = []
    with torch.no_grad():
        for sample in samples:
            out = hf_moe(torch.tensor([sample.tokens]), output_router_logits=True)
            ids = torch.stack([torch.topk(logits.softmax(-1), 2, dim=-1).indices for logits in out.router_logits], 1)
            sample.routed_experts = ids.reshape(len(sample.tokens), -1).tolist()
            sample.routed_experts[-1] = []  # the last token never runs through the engine
            positions = torch.tensor([i for i, m in enumerate(sample.loss_mask) if m])
            logprobs.append(torch.log_softmax(out.logits[0], -1)[positions - 1, torch.tensor(sample.tokens)[positions]])
    return logprobs


def replay_run(policy, samples, engine_logprobs) -> tuple[float, int]:
    """(the policy's largest logprob gap to the engine's, how many tree tokens went to other experts
    than recorded in some layer) on one packed tree of `samples`."""
    from roost.trainer.megatron.routing_replay import replay_hooks

    hooks = replay_hooks(policy.model)  # each keeps its forward's chosen experts, replaying or not
    ours = policy.logprobs(samples, layout="tree")
    gap = max(float((a - b).abs().max()) for a, b in zip(ours, engine_logprobs))
    scored = [[i for i, m in enumerate(s.loss_mask) if m] for s in samples]
    mb = tree_microbatch(
        [s.tokens for s in samples], scored, range(len(samples)), routing=[s.routed_experts for s in samples]
    )
    recorded = mb.routed_experts.reshape(mb.num_tokens, len(hooks), -1)
    chosen = torch.stack([hook.chosen for hook in hooks], 1)  # [tokens, layers, top_k]
    kept = (recorded >= 0).all(-1).all(-1)  # the trees' last tokens have no record
    differs = (chosen.sort(-1).values != recorded.sort(-1).values).any(-1).any(-1) & kept
    return gap, int(differs.sum())


def test_routing_replay_routes_by_the_recorded_experts(megatron_world, moe_path, hf_moe, tmp_path):
    """The engine samples with the checkpoint's routers; the trainer's are off by 0.01 (another
    kernel, precision or a stale step would do the same), so some top-2 choices flip."""
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    samples = grpo_batch(groups=1, size=3, prompt=12, answer=6)
    engine_logprobs = engine_routing(hf_moe, samples)
    state = hf_checkpoint.read_weights(moe_path)
    noise = torch.Generator().manual_seed(0)
    for name, tensor in state.items():
        if name.endswith("mlp.gate.weight"):
            tensor += 0.01 * torch.randn(tensor.shape, generator=noise)
    hf_checkpoint.write_checkpoint(state, moe_path, tmp_path / "trainer")

    policy = MegatronPolicy(TrainConfig(checkpoint=str(tmp_path / "trainer"), token_budget=256, routing_replay=False))
    gap_off, flipped_off = replay_run(policy, samples, engine_logprobs)
    policy.config.routing_replay = True
    gap_on, flipped_on = replay_run(policy, samples, engine_logprobs)
    assert flipped_off > 0 and gap_off > 5e-3
    assert flipped_on == 0 and gap_on < gap_off / 5  # what is left: the perturbed gating weights

    exact = MegatronPolicy(TrainConfig(checkpoint=str(moe_path), token_budget=256, routing_replay=True))
    gap, flipped = replay_run(exact, samples, engine_logprobs)
    assert flipped == 0 and gap <= 1e-4  # the engine's own routers: replay changes nothing

    # the replayed experts' gating weights still come from the trainer's router: it trains
    from roost.trainer.advantages import AdvantageConfig, Group, compute_advantages

    for k, sample in enumerate(samples):
        sample.reward = float(k % 2)
    scored, _ = compute_advantages([Group("g0", samples)], AdvantageConfig())
    before = policy.hf_state()["model.layers.0.mlp.gate.weight"]
    assert policy.train_step(scored).updated
    assert not torch.equal(policy.hf_state()["model.layers.0.mlp.gate.weight"], before)


@pytest.mark.parametrize("layout", ["tree", "flat"])
def test_rows_padded_for_sequence_parallelism_score_and_route_as_before(megatron_world, moe_path, layout):
    """Tensor parallelism on an MoE model splits the packed rows between the ranks, so they are
    padded to a multiple of the ranks first: the pad tokens change no logprob, the scored and
    recorded rows are renumbered (flat rows: several per microbatch), and pads carry no experts."""
    from roost.trainer.megatron.sequence_parallel import pad_rows
    from roost.trainer.prefix_tree import flat_microbatch

    spec = ModelSpec.from_folder(moe_path)
    model = build_gpt_model(spec, transformer_config(spec), "sdpa")
    convert.load_into(model, convert.hf_to_megatron(hf_checkpoint.read_weights(moe_path), spec))
    samples = grpo_batch(groups=1, size=3, prompt=13, answer=6)
    routing = [moe_worker.forced_routing(len(s.tokens), spec.moe) if k != 1 else None for k, s in enumerate(samples)]
    scored = [[i for i, m in enumerate(s.loss_mask) if m] for s in samples]
    pack = tree_microbatch if layout == "tree" else flat_microbatch
    mb = pack([s.tokens for s in samples], scored, range(len(samples)), routing=routing)
    padded = pad_rows(mb, 4)
    width = padded.input_ids.shape[1]
    assert (
        width % 4 == 0
        and width > mb.input_ids.shape[1]
        and padded.routed_experts.shape[0] == width * len(padded.input_ids)
    )
    pads = padded.routed_experts.reshape(len(padded.input_ids), width, -1)[:, mb.input_ids.shape[1] :]
    assert bool((pads == -1).all())
    assert pad_rows(padded, 4) is padded  # nothing to pad
    inv_freq = inverse_frequencies(spec)
    with torch.no_grad():
        before = scored_logprobs(model, mb, inv_freq)
        after = scored_logprobs(model, padded, inv_freq)
    assert float((before - after).abs().max()) <= 1e-6


def test_lora_on_the_moe_model_adapts_attention_and_refuses_experts(moe_path):
    from roost.rollout.lora import AdapterError, LoraSpec
    from roost.trainer.megatron.lora import hosts_for

    spec = ModelSpec.from_folder(moe_path)
    attention = hosts_for(LoraSpec(rank=4, alpha=8, targets=("q_proj", "o_proj")), spec)
    assert set(attention) == {
        f"decoder.layers.{i}.self_attention.{n}" for i in (0, 1) for n in ("linear_qkv", "linear_proj")
    }
    with pytest.raises(AdapterError, match="MLPs are experts"):
        hosts_for(LoraSpec(rank=4, alpha=8, targets=("q_proj", "gate_proj")), spec)
