"""The prefix tree changes nothing but cost: per-token logprobs and gradients of a packed
tree equal those of running each sample alone (fp32: logprobs within 1e-5 of Hugging
Face's own model, gradients within 1e-4 relative of the one-sample-at-a-time run). The
tree's masks are built on the model's device, and an attention that would ignore them is
refused."""

from __future__ import annotations

import pytest
import torch

from roost.rollout.engine.model_spec import ModelSpec
from roost.rollout.engine.rope import inverse_frequencies
from roost.tests.trainer.trainer_fixtures import agentic_batch, grpo_batch
from roost.trainer import hf_checkpoint
from roost.trainer.megatron import convert
from roost.trainer.megatron.attention import TreeMaskIgnored
from roost.trainer.megatron.model import build_gpt_model, layer_spec, scored_logprobs, transformer_config
from roost.trainer.prefix_tree import build_microbatches, flat_microbatch

BATCHES = {"grpo": lambda: grpo_batch(), "agentic": lambda: agentic_batch()}


@pytest.fixture(scope="module")
def tiny(megatron_world, tiny_model_path):
    spec = ModelSpec.from_folder(tiny_model_path)
    model = build_gpt_model(spec, transformer_config(spec), "sdpa")
    convert.load_into(model, convert.hf_to_megatron(hf_checkpoint.read_weights(tiny_model_path), spec))
    return model, inverse_frequencies(spec)


@pytest.fixture(scope="module")
def hf_model(tiny_model_path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()


def scored_positions(samples):
    return [[i for i, m in enumerate(s.loss_mask) if m] for s in samples]


def tree_logprobs(model, inv_freq, samples, budget=4096):
    out = {}
    mbs = build_microbatches(
        [s.tokens for s in samples], scored_positions(samples), [s.group_id for s in samples], budget
    )
    for mb in mbs:
        for index, lp in zip(mb.sample_index, mb.sample_logprobs(scored_logprobs(model, mb, inv_freq))):
            out[index] = lp
    return [out[i] for i in range(len(samples))], mbs


def alone_logprobs(model, inv_freq, samples):
    return [
        scored_logprobs(model, flat_microbatch([s.tokens], [p], [i]), inv_freq)
        for i, (s, p) in enumerate(zip(samples, scored_positions(samples)))
    ]


@pytest.mark.parametrize("kind", sorted(BATCHES))
def test_tree_logprobs_equal_hf_per_sample(tiny, hf_model, kind):
    model, inv_freq = tiny
    samples = BATCHES[kind]()
    with torch.no_grad():
        tree, mbs = tree_logprobs(model, inv_freq, samples)
    assert sum(mb.num_tokens for mb in mbs) < sum(len(s) for s in samples)  # something was shared
    worst = 0.0
    for sample, lp, pos in zip(samples, tree, scored_positions(samples)):
        with torch.no_grad():
            logits = hf_model(torch.tensor([sample.tokens])).logits[0].float()
        ref = torch.log_softmax(logits, -1)[torch.tensor(pos) - 1, torch.tensor([sample.tokens[i] for i in pos])]
        worst = max(worst, float((ref - lp).abs().max()))
    assert worst <= 1e-5


@pytest.mark.parametrize("kind", sorted(BATCHES))
def test_tree_gradients_equal_per_sample_runs(tiny, kind):
    model, inv_freq = tiny
    samples = BATCHES[kind]()
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(len(p), generator=gen) for p in scored_positions(samples)]

    def grads(logprobs_fn):
        model.zero_grad(set_to_none=True)
        logprobs = logprobs_fn(model, inv_freq, samples)
        logprobs = logprobs[0] if isinstance(logprobs, tuple) else logprobs
        sum((w * lp).sum() for w, lp in zip(weights, logprobs)).backward()
        return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}

    tree, alone = grads(tree_logprobs), grads(alone_logprobs)
    assert tree.keys() == alone.keys() and tree
    for name in tree:
        denom = alone[name].norm().clamp_min(1e-12)
        assert float((tree[name] - alone[name]).norm() / denom) <= 1e-4, name


def test_megatron_local_attention_matches_sdpa(megatron_world, tiny_model_path, tiny):
    """Megatron's own DotProductAttention takes the tree mask as given, too."""
    spec = ModelSpec.from_folder(tiny_model_path)
    local = build_gpt_model(spec, transformer_config(spec), "local")
    convert.load_into(local, convert.model_state(tiny[0]))
    samples = agentic_batch()
    with torch.no_grad():
        a, _ = tree_logprobs(tiny[0], tiny[1], samples)
        b, _ = tree_logprobs(local, tiny[1], samples)
    assert max(float((x - y).abs().max()) for x, y in zip(a, b)) <= 1e-5


def test_small_budget_splits_groups_without_changing_logprobs(tiny):
    model, inv_freq = tiny
    samples = grpo_batch(groups=1, size=6)
    with torch.no_grad():
        whole, one = tree_logprobs(model, inv_freq, samples, budget=4096)
        split, many = tree_logprobs(model, inv_freq, samples, budget=40)
    assert len(one) == 1 and len(many) > 1
    assert max(float((x - y).abs().max()) for x, y in zip(whole, split)) <= 1e-5


@pytest.mark.parametrize("attention", ["sdpa", "local"])
@pytest.mark.parametrize("layout", ["tree", "flat"])
def test_the_forward_builds_its_masks_on_the_models_device(megatron_world, tiny_model_path, attention, layout):
    """On "meta" (a device that is not the CPU, as a GPU is not), any mask or index built on
    the CPU and met with the model's tensors raises."""
    spec = ModelSpec.from_folder(tiny_model_path)
    model = build_gpt_model(spec, transformer_config(spec), attention).to("meta")
    samples = agentic_batch()
    for mb in build_microbatches(
        [s.tokens for s in samples], scored_positions(samples), [s.group_id for s in samples], 4096, layout
    ):
        values = scored_logprobs(model, mb, inverse_frequencies(spec))
        assert values.device.type == "meta" and values.shape == mb.score_targets.shape


class MaskTypeAttention(torch.nn.Module):
    """Core attention with Transformer Engine's contract: it applies the mask it is given only
    under the `arbitrary` mask type, and is causal under `causal` (whatever the mask)."""

    def __init__(self, config, layer_number, attn_mask_type, attention_type, **_: object) -> None:
        super().__init__()
        self.attn_mask_type = attn_mask_type
        self.scale = config.kv_channels**-0.5

    def forward(self, query, key, value, attention_mask, attn_mask_type=None, **_: object):
        from megatron.core.transformer.enums import AttnMaskType

        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        arbitrary = (attn_mask_type or self.attn_mask_type) == AttnMaskType.arbitrary
        context = torch.nn.functional.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=~attention_mask if arbitrary else None,
            is_causal=not arbitrary,
            scale=self.scale,
            enable_gqa=q.shape[1] != k.shape[1],
        )
        s, b = query.shape[:2]
        return context.permute(2, 0, 1, 3).reshape(s, b, -1)


def mask_type_model(tiny_model_path, sdpa_model, mask_type: str):
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.enums import AttnMaskType

    spec = ModelSpec.from_folder(tiny_model_path)
    layers = layer_spec(spec, "local")
    layers.submodules.self_attention.submodules.core_attention = MaskTypeAttention
    layers.submodules.self_attention.params = {"attn_mask_type": AttnMaskType[mask_type]}
    model = GPTModel(
        transformer_config(spec),
        layers,
        vocab_size=spec.vocab_size,
        max_sequence_length=spec.max_position_embeddings,
        position_embedding_type="rope",
        rotary_base=int(spec.rope_theta),
        share_embeddings_and_output_weights=spec.tie_word_embeddings,
    )
    convert.load_into(model, convert.model_state(sdpa_model))
    return model


def test_an_attention_that_would_ignore_the_tree_mask_is_refused(megatron_world, tiny_model_path, tiny):
    samples = agentic_batch()
    causal = mask_type_model(tiny_model_path, tiny[0], "causal")
    with torch.no_grad(), pytest.raises(TreeMaskIgnored, match="set trainer.attention to sdpa"):
        tree_logprobs(causal, tiny[1], samples)
    # flat rows are causal anyway: allowed, and the same as SDPA's
    with torch.no_grad():
        flat, reference = alone_logprobs(causal, tiny[1], samples), alone_logprobs(tiny[0], tiny[1], samples)
    assert max(float((x - y).abs().max()) for x, y in zip(flat, reference)) <= 1e-5


def test_an_attention_under_the_arbitrary_mask_type_takes_the_tree(megatron_world, tiny_model_path, tiny):
    """What roost's `te` spec sets: the tree's dense mask applies, logprobs equal SDPA's."""
    samples = agentic_batch()
    arbitrary = mask_type_model(tiny_model_path, tiny[0], "arbitrary")
    with torch.no_grad():
        a, _ = tree_logprobs(arbitrary, tiny[1], samples)
        b, _ = tree_logprobs(tiny[0], tiny[1], samples)
    assert max(float((x - y).abs().max()) for x, y in zip(a, b)) <= 1e-5


def test_te_attention_without_transformer_engine_says_what_to_use(tiny_model_path):
    if torch.cuda.is_available():
        pytest.skip("Transformer Engine may run here")
    with pytest.raises(ValueError, match="use sdpa"):
        layer_spec(ModelSpec.from_folder(tiny_model_path), "te")
