"""The engine and the trainer build their models from one reading of the checkpoint's config:
for a Llama with Llama 3 RoPE scaling and a head_dim other than hidden_size / heads, the
trainer's logprobs of the tokens the engine sampled are the engine's, and Hugging Face's. For
calls held to a grammar through the gateway, the trainer's logprobs of the recorded tokens are the
recorded ones: the mask chose the tokens, the logprobs stay the model's own."""

from __future__ import annotations

import asyncio
import json
import shutil

import httpx
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from roost.rollout.engine.engine import Engine, EngineConfig
from roost.rollout.engine.model_spec import ModelSpec, UnsupportedModel
from roost.rollout.engine.rope import inverse_frequencies
from roost.rollout.engine.tokenizer_files import qwen3_tokenizer_dir
from roost.rollout.engine_api.wire import SamplingParams
from roost.rollout.keys import bearer
from roost.tests.rollout.gateway_helpers import new_session, running_gateway, stored_calls
from roost.trainer import hf_checkpoint
from roost.trainer.megatron import convert
from roost.trainer.megatron.model import build_gpt_model, scored_logprobs, transformer_config
from roost.trainer.prefix_tree import tree_microbatch

SHAPE = dict(
    vocab_size=256,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=256,
    tie_word_embeddings=False,
    initializer_range=0.3,
)  # weights large enough that attention, and so RoPE, shows in logprobs
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
    "rope_theta": 500000.0,
}
PROMPT = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(3)).tolist()
ANSWER = {
    "type": "object",
    "properties": {"answer": {"type": "string", "maxLength": 12}, "sure": {"type": "boolean"}},
    "required": ["answer", "sure"],
    "additionalProperties": False,
}
LOOK = {
    "type": "function",
    "function": {"name": "look", "description": "Look around.", "parameters": {"type": "object", "properties": {}}},
}
# one call per constraint the gateway enforces, and what its record must say held it
CONSTRAINED = [
    (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": ANSWER, "strict": True},
            }
        },
        {"source": "response_format", "type": "json_schema"},
    ),
    (
        {"allowed_replies": ["go north", "take key (brass)", "open door."]},
        {"source": "allowed_replies", "type": "regex"},
    ),
    (
        {
            "tools": [LOOK],
            "tool_choice": "required",
            "parallel_tool_calls": False,
            "chat_template_kwargs": {"enable_thinking": False},
        },
        {"source": "tool_choice", "type": "ebnf"},
    ),
]


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


async def test_the_trainer_recomputes_the_recorded_logprobs_of_constrained_calls(
    megatron_world, engine_url, tiny_model_path, tmp_path
):
    with running_gateway(engine_url, tmp_path / "calls.sqlite") as (server, store):
        session = new_session(server)
        bodies = [
            {
                "model": "tiny",
                "messages": [{"role": "user", "content": "Where now?"}],
                "temperature": 1.0,
                "seed": seed,
                "max_tokens": 48,
                **fields,
            }
            for fields, _ in CONSTRAINED
            for seed in range(2)
        ]
        async with httpx.AsyncClient(timeout=300, headers=bearer(session["key"])) as client:
            answers = await asyncio.gather(
                *(client.post(f"{session['base_url']}/chat/completions", json=body) for body in bodies)
            )
    assert [a.status_code for a in answers] == [200] * len(bodies), [a.text for a in answers if a.status_code != 200]
    calls = sorted(stored_calls(store, session["session_id"]), key=lambda c: json.dumps(c.sampling_params))
    held = [c.response["constraint"] for c in calls]
    assert sorted(map(json.dumps, held)) == sorted(json.dumps(record) for _, record in CONSTRAINED for _ in range(2))
    assert all(record["type"] in call.sampling_params for call, record in zip(calls, held))

    spec = ModelSpec.from_folder(tiny_model_path)
    model = build_gpt_model(spec, transformer_config(spec), "sdpa")
    convert.load_into(model, convert.hf_to_megatron(hf_checkpoint.read_weights(tiny_model_path), spec))
    sequences = [list(c.prompt_ids) + list(c.sampled_ids) for c in calls]
    scored = [list(range(len(c.prompt_ids), len(s))) for c, s in zip(calls, sequences)]
    microbatch = tree_microbatch(sequences, scored, list(range(len(calls))))  # shared prompts: one trie, as in training
    with torch.no_grad():
        trainer_lp = scored_logprobs(model, microbatch, inverse_frequencies(spec))
    for call, rows in zip(calls, microbatch.sample_scores):
        recorded = torch.tensor(list(call.sampled_logprobs))
        assert float((trainer_lp[rows] - recorded).abs().max()) <= 1e-5, call.response["constraint"]
        # the grammar forced tokens the model would rarely pick: a renormalised (masked) logprob would be ~0
        assert float(recorded.min()) < -5, call.response["constraint"]


def test_what_neither_model_runs_is_refused_when_the_config_is_read():
    config = LlamaConfig(**SHAPE).to_dict() | {"architectures": ["LlamaForCausalLM"]}
    assert ModelSpec.from_config(config).rope_scaling is None
    with pytest.raises(UnsupportedModel, match="partial_rotary_factor"):
        ModelSpec.from_config(config | {"partial_rotary_factor": 0.5})
    with pytest.raises(UnsupportedModel, match="LlamaForSequenceClassification"):
        ModelSpec.from_config(config | {"architectures": ["LlamaForSequenceClassification"]})
