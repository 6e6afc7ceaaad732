"""Policy losses over per-sample token logprobs: PPO clip (with dual clip), GRPO, GSPO, CISPO,
and the negative log-likelihood of supervised fine-tuning (`sft`); and PPO's clipped value loss
for the critic (`value_losses`).

Every loss here is a weighted sum over sampled tokens, with the weights fixed for the
whole step before microbatching (`token_weights`), so summing microbatch losses gives
exactly the full-batch loss whatever the packing. Off-policy correction: the ratio is
taken against `old_logprobs` (the trainer's own logprobs of the rollout policy when
recomputed, else the engine's rollout logprobs), and an off-policy correction
(`roost.trainer.corrections`: token or sequence TIS, MIS, geometric masking, IcePop, outlier
masking) weights or masks each token by the gap exp(old - rollout), stopped from the gradient.
CISPO (MiniMax-M1) keeps every token's gradient: its loss is -sg(clip(ratio)) * A * log p.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from roost.trainer.corrections import Correction, mismatch, weights
from roost.trainer.recipe import LossSection

# The recipe's loss section is where a default lives; LossConfig reads the fields the recipe has
# from it, so a LossConfig built without a recipe trains as a recipe that leaves them out.
_RECIPE = LossSection()


@dataclass
class LossConfig:
    """How the policy loss is computed; one of these per training recipe."""

    kind: str = _RECIPE.kind
    """`ppo` (token-level clipped ratio), `grpo` (same clip, KL in the loss, sequence-mean
    aggregation by default), `gspo` (sequence-level ratio) or `sft` (negative log-likelihood of
    the loss-masked tokens; advantages and rollout logprobs are ignored)."""
    clip_low: float = _RECIPE.clip_low
    clip_high: float = _RECIPE.clip_high
    """PPO clip range [1 - clip_low, 1 + clip_high]; clip_high 0.28 (the default) is DAPO's clip-higher."""
    dual_clip: float | None = _RECIPE.dual_clip
    """Dual clip c > 1: for negative advantages the loss is capped at -A * c. None disables it."""
    gspo_clip_low: float = 3e-4
    gspo_clip_high: float = 4e-4
    tis_cap: float | None = _RECIPE.tis_cap
    """Shorthand for `correction=Correction("tis", cap=tis_cap)` when `correction` is None; None: no correction."""
    correction: Correction | None = None
    """The off-policy correction (`roost.trainer.corrections`); None: `tis_cap`'s token TIS, if any."""
    kl_coef: float = _RECIPE.kl_coef
    """Weight of the k3 KL estimate to the reference model (needs reference logprobs)."""
    aggregation: str | None = _RECIPE.aggregation
    """`token_mean` (all tokens of the step count equally) or `seq_mean_token_mean` (each
    sample counts equally); None picks token_mean, or seq_mean_token_mean for grpo."""

    def __post_init__(self) -> None:
        if self.kind not in ("ppo", "grpo", "gspo", "cispo", "sft"):
            raise ValueError(f"unknown loss kind {self.kind!r}; use ppo, grpo, gspo, cispo or sft")
        if self.correction is None and self.tis_cap is not None:
            self.correction = Correction("tis", cap=self.tis_cap)
        if self.aggregation is None:
            self.aggregation = "seq_mean_token_mean" if self.kind == "grpo" else "token_mean"
        if self.aggregation not in ("token_mean", "seq_mean_token_mean"):
            raise ValueError(f"unknown aggregation {self.aggregation!r}; use token_mean or seq_mean_token_mean")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(f"dual_clip must exceed 1 (got {self.dual_clip})")


def token_weights(num_sampled: Sequence[int], aggregation: str) -> list[float]:
    """Per-sample weight of each sampled token, for the whole step (all DP ranks)."""
    total = sum(num_sampled)
    if total == 0:
        raise ValueError("no sampled tokens in the batch: nothing to train on")
    if aggregation == "token_mean":
        return [1.0 / total] * len(num_sampled)
    live = sum(1 for n in num_sampled if n)
    return [1.0 / (n * live) if n else 0.0 for n in num_sampled]


@dataclass
class SampleTerms:
    """One sample's per-token inputs to the loss (sampled tokens only, in order)."""

    logprobs: torch.Tensor
    old_logprobs: torch.Tensor
    rollout_logprobs: torch.Tensor
    advantages: torch.Tensor
    weight: float
    ref_logprobs: torch.Tensor | None = None


def policy_loss(terms: Sequence[SampleTerms], config: LossConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """The summed loss of these samples and a few detached statistics (also summed)."""
    total = torch.zeros((), device=terms[0].logprobs.device) if terms else torch.zeros(())
    stats = new_stats()
    for t in terms:
        if t.logprobs.numel() == 0:
            continue
        total = total + _sample_loss(t, config, stats)
    return total, stats


def _sample_loss(t: SampleTerms, config: LossConfig, stats: dict[str, float]) -> torch.Tensor:
    stats["tokens"] += t.logprobs.numel()
    stats["neg_logprob"] += float(-t.logprobs.detach().sum())
    return t.weight * token_losses(t, config, stats).sum()


def new_stats() -> dict[str, float]:
    """The statistics `policy_loss` sums, all zero."""
    keys = ("clip_fraction", "tis_mean", "masked", "kl", "tokens", "neg_logprob", "rollout_abs_diff")
    return dict.fromkeys((*keys, *mismatch(torch.zeros(0), torch.zeros(0))), 0.0)


def token_losses(t: SampleTerms, config: LossConfig, stats: dict[str, float]) -> torch.Tensor:
    """Each sampled token's loss before the sample's weight (their sum is the sample's loss); adds
    the clip, TIS, KL and rollout statistics to `stats`."""
    if config.kind == "sft":
        return -t.logprobs
    # the trainer's logprobs of the rollout policy against the engine's (sums of |difference|)
    stats["rollout_abs_diff"] += float((t.old_logprobs.detach() - t.rollout_logprobs).abs().sum())
    log_ratio = t.logprobs - t.old_logprobs
    adv = t.advantages
    if config.kind == "gspo":
        seq_log_ratio = log_ratio.mean()
        # s_i for the value, token logprobs for the gradient (GSPO-token form)
        ratio = torch.exp(seq_log_ratio.detach() + t.logprobs - t.logprobs.detach())
        low, high = 1 - config.gspo_clip_low, 1 + config.gspo_clip_high
    else:
        ratio = torch.exp(log_ratio)
        low, high = 1 - config.clip_low, 1 + config.clip_high
    if config.kind == "cispo":
        # the clipped ratio as a weight, stopped: every token keeps its gradient through log p
        loss = -adv * ratio.clamp(low, high).detach() * t.logprobs
    else:
        loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(low, high))
    if config.dual_clip is not None and config.kind in ("ppo", "grpo"):
        loss = torch.where(adv < 0, torch.minimum(loss, -adv * config.dual_clip), loss)
    for key, value in mismatch(t.old_logprobs, t.rollout_logprobs).items():
        stats[key] += value
    if config.correction is not None:
        weight = weights(config.correction, t.old_logprobs, t.rollout_logprobs)
        loss = loss * weight
        stats["tis_mean"] += float(weight.sum())
        stats["masked"] += float((weight == 0).sum())
    if config.kl_coef:
        if t.ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs reference logprobs; configure a reference model")
        delta = t.ref_logprobs - t.logprobs
        kl = torch.exp(delta) - delta - 1
        loss = loss + config.kl_coef * kl
        stats["kl"] += float(kl.detach().sum())
    stats["clip_fraction"] += float(((ratio < low) | (ratio > high)).float().sum())
    return loss


def value_losses(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's value loss per sampled token, max((V - R)^2, (clip(V, V_old - clip, V_old + clip) - R)^2) / 2
    (the plain (V - R)^2 / 2 with `clip` None), and which tokens the clipped term set. The max keeps
    a value from earning a smaller loss by moving far from the values the advantages were computed
    with; the clip does not stop a value moving back towards them."""
    unclipped = (values - returns) ** 2
    if clip is None:
        return unclipped / 2, torch.zeros_like(unclipped, dtype=torch.bool)
    clipped = (old_values + (values - old_values).clamp(-clip, clip) - returns) ** 2
    return torch.maximum(unclipped, clipped) / 2, clipped > unclipped
