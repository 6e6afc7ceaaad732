"""Checks shared by the engine's tests."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def recorded_and_forward_logprobs(
    answer: dict, model_path: Path, prompt_text: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The logprobs a /generate answer recorded for its sampled tokens, and the same tokens'
    logprobs from one plain forward pass of the Hugging Face model over prompt + reply."""
    entries = answer["meta_info"]["output_token_logprobs"]
    sampled = answer["output_ids"]
    assert [entry[1] for entry in entries] == sampled
    prompt = AutoTokenizer.from_pretrained(model_path).encode(prompt_text, add_special_tokens=False)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + sampled])).logits[0].float()
    forward = torch.log_softmax(logits, -1)[len(prompt) - 1 : -1].gather(1, torch.tensor(sampled)[:, None])[:, 0]
    return torch.tensor([entry[0] for entry in entries]), forward
