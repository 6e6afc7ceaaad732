"""The small-vocabulary demo model is an ordinary checkpoint the engine serves."""

from __future__ import annotations

import httpx
from transformers import AutoTokenizer

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.engine.small_vocab_model import SmallModelShape, build_small_vocab_model

CORPUS = [
    "You are in the middle of a room. Looking around you, you see a cabinet 1, a drawer 2, and a fridge 1.",
    "Your task is to: put a clean apple in fridge. > go to fridge 1 You arrive at fridge 1. The fridge 1 is closed.",
    "> open fridge 1 You open the fridge 1. In it, you see a apple 1 and a tomato 2. > take apple 1 from fridge 1",
] * 20


def test_small_vocab_model_round_trips_through_tokenizer_template_and_engine(tmp_path):
    folder = build_small_vocab_model(CORPUS, tmp_path / "demo", SmallModelShape(vocab_size=400, num_hidden_layers=2))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert len(tokenizer) <= 400 + 16
    text = 'go to fridge 1 <tool_call>\n{"name": "act"}\n</tool_call>'
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    assert tokenizer.convert_tokens_to_ids("<tool_call>") in ids
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "go to fridge 1"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt == "<|im_start|>user\ngo to fridge 1<|im_end|>\n<|im_start|>assistant\n"
    with EngineProcess(str(folder)) as url:
        answer = httpx.post(
            f"{url}/generate",
            json={
                "input_ids": tokenizer.encode(prompt, add_special_tokens=False),
                "sampling_params": {"max_new_tokens": 5, "temperature": 0, "ignore_eos": True},
                "return_logprob": True,
            },
            timeout=60,
        ).json()
        info = httpx.get(f"{url}/get_model_info").json()
    assert len(answer["output_ids"]) == 5 and all(t < len(tokenizer) for t in answer["output_ids"])
    assert info["vocab_size"] == len(tokenizer) and info["eos_token_ids"] == [
        tokenizer.convert_tokens_to_ids("<|im_end|>")
    ]
