"""Top-k prompt logprobs through the pinned SDK: at each prompt position the k most likely next
tokens and their logprobs, from the engine's model, equal a plain transformers forward of the same
weights (ids equal, logprobs within 1e-4); the first position, which has no context, is None."""

from __future__ import annotations

import numpy as np
import pytest

tinker = pytest.importorskip("tinker")

PROMPT = [11, 22, 33, 44, 55, 66, 77, 88]
K = 5


def _oracle_topk(folder, tokens: list[int], k: int):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0, :-1]
    values, ids = torch.topk(torch.log_softmax(logits.float(), dim=-1), k, dim=-1)
    return ids.numpy(), values.numpy()


def test_topk_prompt_logprobs_equal_a_transformers_forward(service, tiny_model_path):
    sampler = service.create_sampling_client(base_model="tiny").result()
    params = tinker.types.SamplingParams(max_tokens=1, temperature=0.0)
    prompt = tinker.types.ModelInput.from_ints(PROMPT)
    out = sampler.sample(prompt, 1, params, include_prompt_logprobs=True, topk_prompt_logprobs=K).result()

    topk = out.topk_prompt_logprobs
    assert len(topk) == len(PROMPT) and topk[0] is None and all(len(row) == K for row in topk[1:])
    ids, values = _oracle_topk(tiny_model_path, PROMPT, K)
    np.testing.assert_array_equal(np.array([[t for t, _ in row] for row in topk[1:]]), ids)
    np.testing.assert_allclose(np.array([[lp for _, lp in row] for row in topk[1:]]), values, atol=1e-4)
    # the prompt's own logprobs come along, and never beat the top one at their position
    assert out.prompt_logprobs[0] is None and all(
        lp <= row[0][1] + 1e-6 for lp, row in zip(out.prompt_logprobs[1:], topk[1:])
    )


def test_topk_without_prompt_logprobs_and_a_bad_k(service):
    sampler = service.create_sampling_client(base_model="tiny").result()
    params = tinker.types.SamplingParams(max_tokens=1, temperature=0.0)
    prompt = tinker.types.ModelInput.from_ints(PROMPT)
    out = sampler.sample(prompt, 1, params, include_prompt_logprobs=False, topk_prompt_logprobs=2).result()
    assert out.prompt_logprobs is None and len(out.topk_prompt_logprobs) == len(PROMPT)
    with pytest.raises(tinker.BadRequestError, match="topk_prompt_logprobs"):
        sampler.sample(prompt, 1, params, include_prompt_logprobs=True, topk_prompt_logprobs=-1).result()
