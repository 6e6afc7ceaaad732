"""Prompt scores: the model's logprob of every prompt token given the ones before it.

What a teacher gives a student in on-policy distillation (its logprobs of the student's own
sampled tokens, by token id: no re-tokenization), what Tinker's `compute_logprobs` and
`include_prompt_logprobs` answer, and SGLang's `/generate` with `return_logprob` and
`logprob_start_len` (`meta_info.input_token_logprobs`). One prefill of the engine's own model
on a cache of its own, every position's logits kept.
"""

from __future__ import annotations

import math

import numpy as np
import torch


@torch.inference_mode()
def prompt_logprobs(
    engine, tokens: list[int], adapter=None, topk: int = 0
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
    """log p(tokens[i] | tokens[:i]) for every prompt position (NaN at 0, which has no context),
    and with `topk` > 0 the `topk_logprobs` of each position, from the engine's own model through
    `adapter` (a `LoadedAdapter`; None: the base): the prefill of `CausalLM.prefill`, keeping every
    position's logits instead of the last one's, on a cache of its own."""
    from roost.rollout.engine.kv_cache import SlotKVCache
    from roost.rollout.engine.lora_rows import LoraRows

    model, spec = engine.model, engine.spec
    cache = SlotKVCache(
        layers=spec.num_layers,
        slots=1,
        kv_heads=spec.num_kv_heads,
        max_len=len(tokens),
        head_dim=spec.head_dim,
        dtype=engine.dtype,
        reuse_prefixes=False,
    )
    ids = torch.tensor(tokens, dtype=torch.long)
    x = model.model.embed_tokens(ids)[None]
    cos, sin = model.rotary(torch.arange(len(tokens))[None], x.dtype)
    lora, spans = LoraRows.of([adapter], [len(tokens)]), [(0, 0, len(tokens))]
    for layer in model.model.layers:
        x, _ = layer.finish(x, layer.self_attn.prefill(layer.input_layernorm(x), cos, sin, cache, spans, lora), lora)
    every = torch.log_softmax(model.logits(x[0, :-1], LoraRows.of([adapter] * (len(tokens) - 1))), dim=-1)
    logprobs = every.gather(1, ids[1:, None])[:, 0]
    scores = np.concatenate([[math.nan], logprobs.numpy()]).astype(np.float32)
    return scores, topk_logprobs(every, topk) if topk else None


MASK_LOGPROB = -99999.0
"""The SDK's filler for a top-k entry with no token (`tinker.types.topk_logprobs.MASK_LOGPROB`)."""


def topk_logprobs(every: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k most likely tokens and their logprobs at each prompt position, most likely first,
    from the log-softmax of positions 1.. (`every`, [n - 1, vocab]): [n, k] ids and logprobs,
    row 0 (no context) and the columns past the vocabulary filled with (0, MASK_LOGPROB)."""
    n, k_real = every.shape[0] + 1, min(k, every.shape[1])
    ids, logprobs = np.zeros((n, k), np.int32), np.full((n, k), MASK_LOGPROB, np.float32)
    values, indices = torch.topk(every, k_real, dim=-1)
    ids[1:, :k_real], logprobs[1:, :k_real] = indices.numpy(), values.float().numpy()
    return ids, logprobs
