"""Batched prefill: requests of different lengths, some extending cached prefixes, prefilled
together (their tokens packed into one sequence), give the logits of a plain forward pass and
leave their slots' keys and values right for decoding on."""

from __future__ import annotations

import asyncio

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from roost.rollout.engine.engine import Engine, EngineConfig
from roost.rollout.engine_api.wire import SamplingParams

TEXTS = ["The capital of France is", "Once upon a time, in a land far away, there lived", "SELECT"]


def test_a_packed_batch_prefill_equals_a_plain_forward_pass(tiny_model_path):
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


async def test_waiting_requests_are_prefilled_together_up_to_the_token_budget(tiny_model_path):
    """Requests that wait together share one prefill; a budget of one token prefills them one by
    one; both sample the same tokens."""
    greedy = SamplingParams(max_new_tokens=6, temperature=0, ignore_eos=True)
    outputs, batches = [], []
    for budget in (8192, 1):
        engine = Engine(EngineConfig(tiny_model_path, max_running=8, max_prefill_tokens=budget))
        engine.scheduler.set_paused(True)  # let every request arrive before any is admitted
        engine.start()
        try:
            prompts = [engine.encode(text) for text in TEXTS]
            replies = [asyncio.ensure_future(engine.generate(p, greedy)) for p in prompts]
            await asyncio.sleep(0.2)
            engine.scheduler.set_paused(False)
            outputs.append([r.output_ids for r in await asyncio.gather(*replies)])
            batches.append(engine.scheduler.prefill_batches)
        finally:
            engine.stop()
    assert batches == [1, len(TEXTS)]
    assert outputs[0] == outputs[1] and all(len(ids) == 6 for ids in outputs[0])
