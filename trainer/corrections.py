"""Off-policy corrections: how each sampled token's loss is weighted, or masked, for the gap
between the policy that sampled it and the one the ratio is taken against.

The gap is ρ_t = π_old(t) / π_rollout(t) = exp(old_logprob - rollout_logprob): the trainer's
logprob of the token under the rollout's weights (or, with `old_logprobs: rollout`, the engine's
own, and then ρ = 1) against the engine's. It is not 1 when the engine and the trainer compute
differently (kernels, precision, batch shapes) or when the sample is stale (async). Each preset
turns ρ into per-token weights, stopped from the gradient, that multiply the token's loss; a
weight of 0 masks the token (it still counts in the step's token total: the loss's weights are
fixed before microbatching). With L the sample's sampled tokens:

| preset | weight of token t | from |
|---|---|---|
| `tis` | min(ρ_t, cap) | token-level truncated IS (verl `decoupled_token_is`, SkyRL `tis`) |
| `seq_tis` | min(∏_L ρ, cap), the sample's | sequence-level truncated IS (verl `decoupled_seq_is`) |
| `mis` | ∏_L ρ if low ≤ ∏_L ρ ≤ cap, else 0 | masked IS: outliers rejected, not truncated (verl `seq_is_rs`) |
| `geo_mask` | 1 if low ≤ exp(mean_L log ρ) ≤ high, else 0 | geometric-mean sequence masking (verl `geo_rs`) |
| `icepop` | ρ_t if low ≤ ρ_t ≤ high, else 0 | IcePop's two-sided token masking (Ring-1T) |
| `outlier_mask` | min(ρ_t, cap); 0 for the whole sample if any ρ_t < low or > high | TIS with SkyRL's outlier veto |

CISPO (MiniMax-M1) changes the objective rather than weighting it: it is the loss kind `cispo`
(`roost.trainer.losses`). `mismatch` gives the step's rollout/train statistics whatever the
preset: KL(π_rollout ‖ π_old) by the k1 and k3 estimators, and a histogram of log ρ from which
`ratio_quantiles` reads the 5th, 50th and 95th percentiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

PRESETS = ("tis", "seq_tis", "mis", "geo_mask", "icepop", "outlier_mask")
HIST_EDGES = torch.linspace(-2.05, 2.05, 42)
"""log ρ in bins of 0.1 centred on -2.0, -1.9, ..., 2.0, with one open bin below and one above."""
HIST_KEYS = tuple(f"log_ratio_bin_{i:02d}" for i in range(len(HIST_EDGES) + 1))
_SAFE = 20.0  # log ρ is bounded to ±20 before a product or exp (verl's safety bound)


@dataclass(frozen=True)
class Correction:
    """A preset by name and its thresholds (each preset reads the ones its row names)."""

    name: str = "tis"
    cap: float = 2.0
    low: float = 0.5
    high: float = 2.0

    def __post_init__(self) -> None:
        if self.name not in PRESETS:
            raise ValueError(f"unknown off-policy correction {self.name!r}; use one of {', '.join(PRESETS)}")
        if not (0 <= self.low <= 1 <= self.high) or self.cap < 1:
            raise ValueError(
                f"correction {self.name}: need 0 <= low <= 1 <= high and cap >= 1 "
                f"(got low {self.low}, high {self.high}, cap {self.cap})"
            )


def weights(correction: Correction, old_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor) -> torch.Tensor:
    """Each sampled token's weight (detached) under `correction`, from one sample's logprobs."""
    log_ratio = (old_logprobs.detach() - rollout_logprobs).clamp(-_SAFE, _SAFE)
    ratio = log_ratio.exp()
    ones = torch.ones_like(ratio)
    c = correction
    if c.name == "tis":
        return ratio.clamp(max=c.cap)
    if c.name == "seq_tis":
        return ones * log_ratio.sum().clamp(-_SAFE, _SAFE).exp().clamp(max=c.cap)
    if c.name == "mis":
        seq = log_ratio.sum().clamp(-_SAFE, _SAFE).exp()
        return ones * seq if c.low <= seq <= c.cap else torch.zeros_like(ratio)
    if c.name == "geo_mask":
        geo = log_ratio.mean().exp()
        return ones if c.low <= geo <= c.high else torch.zeros_like(ratio)
    if c.name == "icepop":
        return torch.where((ratio >= c.low) & (ratio <= c.high), ratio, torch.zeros_like(ratio))
    # outlier_mask
    if bool(((ratio < c.low) | (ratio > c.high)).any()):
        return torch.zeros_like(ratio)
    return ratio.clamp(max=c.cap)


def mismatch(old_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor) -> dict[str, float]:
    """Sums over one sample's sampled tokens: the k1 and k3 estimates of KL(π_rollout ‖ π_old)
    (E over the rollout's samples of log π_rollout - log π_old, and of ρ - 1 - log ρ) and the
    histogram of log ρ (`HIST_KEYS`)."""
    log_ratio = (old_logprobs.detach() - rollout_logprobs).clamp(-_SAFE, _SAFE)
    bins = torch.bucketize(log_ratio, HIST_EDGES.to(log_ratio.dtype))
    counts = torch.bincount(bins, minlength=len(HIST_KEYS)).tolist()
    return {
        "mismatch_k1": float(-log_ratio.sum()),
        "mismatch_k3": float((log_ratio.exp() - 1 - log_ratio).sum()),
        **{key: float(n) for key, n in zip(HIST_KEYS, counts)},
    }


def ratio_quantiles(sums: dict[str, float], qs: tuple[float, ...] = (0.05, 0.5, 0.95)) -> list[float | None]:
    """ρ at these quantiles, read from the summed histogram (each bin's centre; the open end
    bins read as their edge): None where no token was counted."""
    counts = [sums.get(key, 0.0) for key in HIST_KEYS]
    total = sum(counts)
    if not total:
        return [None] * len(qs)
    edges = HIST_EDGES.tolist()
    centres = [edges[0]] + [(a + b) / 2 for a, b in zip(edges, edges[1:])] + [edges[-1]]
    out: list[float | None] = []
    for q in qs:
        seen = 0.0
        for centre, n in zip(centres, counts):
            seen += n
            if seen >= q * total:
                out.append(math.exp(centre))
                break
    return out
