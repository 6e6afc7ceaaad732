"""Choosing the next token for a whole batch at once: temperature, top-k, top-p, min-p, greedy.

One vectorised pass per decode step: the settings of every row become tensors, the
truncations are masks over the batch, and each sampled row draws by inverse CDF with one
uniform number. That number is a hash of the request's seed and its step (counter-based),
so a seeded request draws the same numbers alone or inside any batch, without a
`torch.Generator` (or a Python loop) per row. A row can draw again from the same distribution
(`Drawn.again`, for a grammar that refused its token) with the numbers of further attempts: a
binary search each in the cumulative masses the first draw computed.

Logprobs are always those of the model's own distribution (log-softmax of the raw logits,
before temperature or truncation): that is the quantity the trainer recomputes, so engine
and trainer can be compared token for token. The scheduler computes them once per batch.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import torch

_MASK32 = 0xFFFFFFFF
_MASK63 = (1 << 63) - 1
_SECOND_STREAM = 0x2545F4914F6CDD1D  # any odd 63-bit constant: the seeds of further, unrelated streams


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    @property
    def truncates(self) -> bool:
        """Whether a sampled draw keeps only some tokens (top-k, top-p or min-p)."""
        return not self.greedy and (self.top_k > 1 or self.top_p < 1.0 or self.min_p > 0.0)


@dataclass(frozen=True)
class RowDraw:
    """Where a row's random number comes from: the request's seed and how many tokens it has."""

    seed: int
    step: int

    def again(self, attempt: int) -> RowDraw:
        """Another number for the same step (attempt 1, 2, ...), independent of this one and of
        the other attempts' (a redraw)."""
        return RowDraw(self.seed ^ ((_SECOND_STREAM * attempt) & _MASK63), self.step)


@dataclass(frozen=True)
class Drawn:
    """A batch's tokens, with what it takes to draw again from the same distributions."""

    tokens: list[int]
    sampled: list[int]
    """The rows that sampled (the others took the argmax), in the order of `cdf`'s rows."""
    cdf: torch.Tensor | None
    """The sampled rows' cumulative masses [len(sampled), V] (None: no row sampled)."""

    def again(self, rows: list[int], draws: list[RowDraw], attempts: int) -> torch.Tensor:
        """Tokens [len(rows), attempts] from the sampled `rows`' distributions, by their draws'
        numbers for attempts 1 to `attempts`: a binary search each, no pass over the vocabulary."""
        if self.cdf is None:
            raise ValueError(f"rows {rows} took the argmax: there is no distribution to draw them again from")
        index = torch.tensor([self.sampled.index(row) for row in rows])
        uniform = torch.full((self.cdf.shape[0], attempts), 0.5, dtype=torch.float64)
        numbers = counter_uniforms([d.again(a) for d in draws for a in range(1, attempts + 1)])
        uniform[index] = numbers.view(len(rows), attempts)
        # every row searched (a search is cheap); copying the rows of a [B, 151936] cdf is not
        return _inverse_cdf(self.cdf, uniform)[index]


def new_seed() -> int:
    """A seed for a request that did not give one."""
    return secrets.randbits(63)


def choose_tokens(logits: torch.Tensor, configs: list[SamplingConfig], draws: list[RowDraw]) -> list[int]:
    """Pick one token per row of `logits` [B, V], each row with its own settings and seed."""
    return draw(logits, configs, draws).tokens


def draw(logits: torch.Tensor, configs: list[SamplingConfig], draws: list[RowDraw]) -> Drawn:
    """`choose_tokens`, keeping the sampled rows' distributions for `Drawn.again`."""
    sampled = [row for row, config in enumerate(configs) if not config.greedy]
    if not sampled:
        return Drawn(logits.argmax(dim=-1).tolist(), [], None)
    every_row = len(sampled) == len(configs)
    # a row copy of a [32, 151936] batch costs as much as the softmax: skip it when all rows sample
    rows = slice(None) if every_row else torch.tensor(sampled)
    # fp32: a token's share of the sum is off by at most one rounding of the running total
    # (~1e-7), and fp64 costs six times as much over a 151k vocabulary
    cdf = torch.cumsum(_truncated_probs(logits[rows].float(), [configs[r] for r in sampled]), dim=-1)
    drawn = _inverse_cdf(cdf, counter_uniforms([draws[r] for r in sampled])[:, None])[:, 0]
    if every_row:
        return Drawn(drawn.tolist(), sampled, cdf)
    tokens = logits.argmax(dim=-1)
    tokens[rows] = drawn
    return Drawn(tokens.tolist(), sampled, cdf)


def _truncated_probs(logits: torch.Tensor, configs: list[SamplingConfig]) -> torch.Tensor:
    temperature = torch.tensor([c.temperature for c in configs], dtype=logits.dtype)
    scores = logits / temperature[:, None]
    top_k = [c.top_k if 0 < c.top_k < scores.shape[-1] else 0 for c in configs]
    if any(top_k):
        scores = _top_k(scores, top_k)
    probs = torch.softmax(scores, dim=-1)
    top_p = torch.tensor([c.top_p for c in configs], dtype=probs.dtype)
    if bool((top_p < 1.0).any()):
        probs = _top_p(probs, top_p)
    min_p = torch.tensor([c.min_p for c in configs], dtype=probs.dtype)
    if bool((min_p > 0.0).any()):
        peak = probs.max(dim=-1, keepdim=True).values
        probs = probs.masked_fill(probs < min_p[:, None] * peak, 0.0)
    return probs


def _top_k(scores: torch.Tensor, top_k: list[int]) -> torch.Tensor:
    """Keep each row's `k` best scores (k = 0: the whole row), one `topk` for the batch."""
    ranked = torch.topk(scores, max(top_k), dim=-1).values
    k = torch.tensor(top_k)
    kth = ranked.gather(1, (k.clamp(min=1) - 1)[:, None])
    kth = kth.masked_fill((k == 0)[:, None], float("-inf"))
    return scores.masked_fill(scores < kth, float("-inf"))


def _top_p(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches each row's `top_p`."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(before > top_p[:, None], 0.0)
    return torch.zeros_like(probs).scatter(-1, order, sorted_probs)


def _inverse_cdf(cdf: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """For each number of `uniform` [S, K], the first token of its row of `cdf` [S, V] whose
    cumulative mass reaches it × the row's total: a token of zero mass adds nothing to the sum,
    so it is never the first to reach a positive target (one rounded up to the total included)."""
    target = (uniform * cdf[:, -1:].double()).float()
    return torch.searchsorted(cdf, target).clamp(max=cdf.shape[-1] - 1)


def counter_uniforms(draws: list[RowDraw]) -> torch.Tensor:
    """One number in (0, 1) per row, a hash of (seed, step): the same for the same pair
    wherever the row sits in a batch. 53 bits from two 32-bit mixes (fp64's mantissa)."""
    seed = torch.tensor([d.seed for d in draws], dtype=torch.int64)
    step = torch.tensor([d.step for d in draws], dtype=torch.int64)
    low, high = seed & _MASK32, (seed >> 32) & _MASK32
    first = _mix32(_mix32(low ^ _mix32(step)) ^ high)
    second = _mix32(first ^ 0x9E3779B9)
    bits = (first << 21) | (second >> 11)  # 32 + 21 = 53 bits
    return (bits.double() + 0.5) / float(1 << 53)


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """The 32-bit finaliser of MurmurHash3, on values held in int64 (products keep their low
    32 bits when int64 wraps, so the masked result is the unsigned 32-bit one)."""
    x = x & _MASK32
    x = ((x ^ (x >> 16)) * 0x85EBCA6B) & _MASK32
    x = ((x ^ (x >> 13)) * 0xC2B2AE35) & _MASK32
    return x ^ (x >> 16)
