"""Choosing the next token: temperature, top-k, top-p, min-p, or greedy.

Logprobs are always those of the model's own distribution (log-softmax of the raw
logits, before temperature or truncation): that is the quantity the trainer recomputes,
so engine and trainer can be compared token for token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1


def choose_tokens(
    logits: torch.Tensor, configs: list[SamplingConfig], generators: list[torch.Generator]
) -> list[int]:
    """Pick one token per row of `logits` [B, V], each row with its own settings and RNG."""
    greedy = logits.argmax(dim=-1).tolist()
    return [
        greedy[row] if config.greedy else _sample_row(logits[row], config, generators[row])
        for row, config in enumerate(configs)
    ]


def _sample_row(logits: torch.Tensor, config: SamplingConfig, generator: torch.Generator) -> int:
    scores = logits / config.temperature
    if config.top_k > 0 and config.top_k < scores.shape[-1]:
        kth = torch.topk(scores, config.top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if config.top_p < 1.0:
        probs = _top_p(probs, config.top_p)
    if config.min_p > 0.0:
        probs = probs.masked_fill(probs < config.min_p * probs.max(), 0.0)
    return int(torch.multinomial(probs, 1, generator=generator))


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_probs, order = torch.sort(probs, descending=True)
    before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(before > top_p, 0.0)
    return torch.zeros_like(probs).scatter(-1, order, sorted_probs)
