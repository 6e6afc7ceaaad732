"""Batched prefill: requests of different lengths, some extending cached prefixes, prefilled
together in one padded batch, give the logits of a plain forward pass and leave their slots'
keys and values right for decoding on."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from roost.rollout.engine.engine import Engine, EngineConfig

TEXTS = ["The capital of France is", "Once upon a time, in a land far away, there lived", "SELECT"]


def test_a_padded_batch_prefill_equals_a_plain_forward_pass(tiny_model_path):
    engine = Engine(EngineConfig(tiny_model_path, max_running=4))
    cache, model = engine.scheduler.cache, engine.model
    prompts = [AutoTokenizer.from_pretrained(tiny_model_path).encode(t) for t in TEXTS]
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()

    # request 0's first half is already cached in its slot (a later turn extends it)
    slots = [cache.acquire()[0] for _ in prompts]
    model.prefill([torch.tensor(prompts[0][:3])], [0], [slots[0]], cache)
    starts = [3, 0, 0]
    chunks = [torch.tensor(p[s:]) for p, s in zip(prompts, starts)]
    batched = model.prefill(chunks, starts, slots, cache)

    next_ids = batched.argmax(-1)
    positions = torch.tensor([len(p) for p in prompts])
    decoded = model.decode_step(next_ids, positions, torch.tensor(slots), cache)
    with torch.no_grad():
        for row, prompt in enumerate(prompts):
            logits = reference(torch.tensor([prompt + [int(next_ids[row])]])).logits[0]
            assert (batched[row] - logits[-2]).abs().max().item() <= 1e-4
            assert (decoded[row] - logits[-1]).abs().max().item() <= 1e-4
