"""Hugging Face ⇄ Megatron conversion: exact round trips for Qwen3, Qwen2 and Llama, per
tensor-parallel rank, and a converted model computes Hugging Face's logprobs."""

from __future__ import annotations

import pytest
import torch

from roost.rollout.engine.model_spec import ModelSpec, UnsupportedModel
from roost.rollout.engine.rope import inverse_frequencies
from roost.trainer import hf_checkpoint
from roost.trainer.megatron import convert
from roost.trainer.megatron.model import build_gpt_model, scored_logprobs, transformer_config
from roost.trainer.prefix_tree import tree_microbatch

SMALL = dict(
    vocab_size=256,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)


def small_checkpoint(tmp_path, family: str, **extra):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    if family == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**SMALL, tie_word_embeddings=False, **extra))
    else:
        model = LlamaForCausalLM(LlamaConfig(**SMALL, tie_word_embeddings=False, **extra))
    folder = tmp_path / family
    model.save_pretrained(folder, safe_serialization=True)
    return folder, model.eval()


@pytest.mark.parametrize("tp", [1, 2])
def test_tiny_qwen3_round_trip_is_exact(tiny_model_path, tp):
    spec = ModelSpec.from_folder(tiny_model_path)
    hf = hf_checkpoint.read_weights(tiny_model_path)
    shards = [convert.hf_to_megatron(hf, spec, tp_rank=r, tp_size=tp) for r in range(tp)]
    back = convert.megatron_to_hf(shards, spec)
    assert back.keys() == hf.keys()
    assert all(torch.equal(back[k], hf[k]) for k in hf)


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_qwen2_and_llama_round_trip_and_logprobs(megatron_world, tmp_path, family):
    folder, hf_model = small_checkpoint(tmp_path, family)
    spec = ModelSpec.from_folder(folder)
    assert spec.qkv_bias == (family == "qwen2") and not spec.qk_norm
    hf = hf_checkpoint.read_weights(folder)
    for tp in (1, 2):
        shards = [convert.hf_to_megatron(hf, spec, tp_rank=r, tp_size=tp) for r in range(tp)]
        back = convert.megatron_to_hf(shards, spec)
        assert back.keys() == hf.keys() and all(torch.equal(back[k], hf[k]) for k in hf)
    model = build_gpt_model(spec, transformer_config(spec), "sdpa")
    convert.load_into(model, convert.hf_to_megatron(hf, spec))
    loaded = convert.megatron_to_hf([convert.model_state(model)], spec)
    assert all(torch.equal(loaded[k], hf[k]) for k in hf)
    tokens = torch.randint(0, 256, (30,), generator=torch.Generator().manual_seed(1)).tolist()
    mb = tree_microbatch([tokens], [list(range(1, 30))], [0])
    with torch.no_grad():
        ours = scored_logprobs(model, mb, inverse_frequencies(spec))
        ref = torch.log_softmax(hf_model(torch.tensor([tokens])).logits[0], -1)[
            torch.arange(29), torch.tensor(tokens[1:])
        ]
    assert float((ours - ref).abs().max()) <= 1e-5


def test_llama3_rope_scaling_matches_hf(megatron_world, tmp_path):
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
        "rope_theta": 500000.0,
    }
    folder, hf_model = small_checkpoint(tmp_path, "llama", rope_parameters=scaling)
    spec = ModelSpec.from_folder(folder)
    assert spec.rope_scaling is not None
    expected = hf_model.model.rotary_emb.inv_freq
    assert torch.equal(inverse_frequencies(spec), expected)


def test_unsupported_models_say_so():
    with pytest.raises(UnsupportedModel, match="not supported"):
        ModelSpec.from_config({"model_type": "mixtral"})
    with pytest.raises(UnsupportedModel, match="bias"):
        ModelSpec.from_config({"model_type": "llama", "attention_bias": True})


def test_mixture_of_experts_checkpoints_with_dense_layers_are_refused():
    """Qwen3-MoE trains on Megatron's MoE layer (test_moe.py) when every layer is sparse."""
    from roost.rollout.engine.tiny_model import TINY_MOE_CONFIG

    assert transformer_config(ModelSpec.from_config(TINY_MOE_CONFIG)).num_moe_experts == 8
    with pytest.raises(UnsupportedModel, match=r"layers \[1\] .* dense MLPs"):
        transformer_config(ModelSpec.from_config({**TINY_MOE_CONFIG, "mlp_only_layers": [1]}))


def test_tensor_parallel_shapes_must_divide(tiny_model_path):
    spec = ModelSpec.from_folder(tiny_model_path)
    hf = hf_checkpoint.read_weights(tiny_model_path)
    with pytest.raises(ValueError, match="not divisible"):
        convert.hf_to_megatron(hf, spec, tp_rank=0, tp_size=3)
