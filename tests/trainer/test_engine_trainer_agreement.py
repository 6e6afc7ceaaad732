"""The engine and the trainer build their models from one reading of the checkpoint's config:
for a Llama with Llama 3 RoPE scaling and a head_dim other than hidden_size / heads, the
trainer's logprobs of the tokens the engine sampled are the engine's, and Hugging Face's."""

from __future__ import annotations

import shutil

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from roost.rollout.engine.engine import Engine, EngineConfig
from roost.rollout.engine.model_spec import ModelSpec, UnsupportedModel
from roost.rollout.engine.rope import inverse_frequencies
from roost.rollout.engine.tokenizer_files import qwen3_tokenizer_dir
from roost.rollout.engine.wire import SamplingParams
from roost.trainer import hf_checkpoint
from roost.trainer.megatron import convert
from roost.trainer.megatron.model import build_gpt_model, scored_logprobs, transformer_config
from roost.trainer.prefix_tree import tree_microbatch

SHAPE = dict(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, max_position_embeddings=256, tie_word_embeddings=False,
             initializer_range=0.3)  # weights large enough that attention, and so RoPE, shows in logprobs
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16, "rope_theta": 500000.0}
PROMPT = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(3)).tolist()


def hf_logprobs(model: LlamaForCausalLM, tokens: list[int], start: int) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0]
    return torch.log_softmax(logits, -1)[start - 1 : -1].gather(1, torch.tensor(tokens[start:])[:, None])[:, 0]


async def test_engine_and_trainer_agree_on_a_scaled_rope_with_its_own_head_dim(megatron_world, tmp_path):
    torch.manual_seed(0)
    hf_model = LlamaForCausalLM(LlamaConfig(**SHAPE, rope_parameters=LLAMA3)).eval()
    folder = tmp_path / "llama"
    hf_model.save_pretrained(folder, safe_serialization=True)
    for item in qwen3_tokenizer_dir().iterdir():  # the engine loads a tokenizer; these ids are bytes in it
        shutil.copy2(item, folder / item.name)
    spec = ModelSpec.from_folder(folder)
    assert spec.head_dim == 16 != spec.hidden_size // spec.num_heads and spec.rope_scaling["rope_type"] == "llama3"

    engine = Engine(EngineConfig(folder, max_running=1))
    engine.start()
    try:
        reply = await engine.generate(PROMPT, SamplingParams(max_new_tokens=24, temperature=0, ignore_eos=True))
    finally:
        engine.stop()
    tokens = PROMPT + reply.output_ids
    engine_lp = torch.tensor(reply.logprobs)

    model = build_gpt_model(spec, transformer_config(spec), "sdpa")
    convert.load_into(model, convert.hf_to_megatron(hf_checkpoint.read_weights(folder), spec))
    microbatch = tree_microbatch([tokens], [list(range(len(PROMPT), len(tokens)))], [0])
    with torch.no_grad():
        trainer_lp = scored_logprobs(model, microbatch, inverse_frequencies(spec))

    reference = hf_logprobs(hf_model, tokens, len(PROMPT))
    assert float((trainer_lp - engine_lp).abs().max()) <= 1e-5
    assert float((engine_lp - reference).abs().max()) <= 1e-5
    # the scaling matters here: the same weights with plain RoPE give other logprobs
    plain = LlamaForCausalLM(LlamaConfig(**SHAPE, rope_parameters={"rope_type": "default", "rope_theta": 500000.0}))
    plain.load_state_dict(hf_model.state_dict())
    assert float((hf_logprobs(plain.eval(), tokens, len(PROMPT)) - reference).abs().max()) > 1e-3


def test_what_neither_model_runs_is_refused_when_the_config_is_read():
    config = LlamaConfig(**SHAPE).to_dict() | {"architectures": ["LlamaForCausalLM"]}
    assert ModelSpec.from_config(config).rope_scaling is None
    with pytest.raises(UnsupportedModel, match="partial_rotary_factor"):
        ModelSpec.from_config(config | {"partial_rotary_factor": 0.5})
    with pytest.raises(UnsupportedModel, match="LlamaForSequenceClassification"):
        ModelSpec.from_config(config | {"architectures": ["LlamaForSequenceClassification"]})
