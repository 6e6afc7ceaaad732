"""Off-policy correction presets against weights worked by hand, CISPO's gradient against its
formula, the mismatch statistics, and the recipe's section."""

from __future__ import annotations

import math

import pytest
import torch

from roost.trainer.corrections import HIST_KEYS, Correction, mismatch, ratio_quantiles, weights
from roost.trainer.losses import LossConfig, SampleTerms, policy_loss
from roost.trainer.recipe import LossSection

# per-token ratios ρ = π_old / π_rollout of one sample: 1.5, 0.25, 3.0, 1.0
RATIOS = [1.5, 0.25, 3.0, 1.0]
ROLLOUT = torch.tensor([-1.0, -2.0, -0.5, -3.0])
OLD = ROLLOUT + torch.log(torch.tensor(RATIOS))


def w(name: str, **thresholds) -> list[float]:
    return [round(x, 6) for x in weights(Correction(name, **thresholds), OLD, ROLLOUT).tolist()]


def test_each_preset_weighs_the_tokens_as_its_formula_says():
    product = 1.5 * 0.25 * 3.0 * 1.0  # 1.125
    geo = product**0.25  # 1.0299
    assert w("tis", cap=2.0) == [1.5, 0.25, 2.0, 1.0]
    assert w("seq_tis", cap=2.0) == [product] * 4
    assert w("seq_tis", cap=1.1) == [1.1] * 4
    assert w("mis", cap=2.0, low=0.5) == [product] * 4
    assert w("mis", cap=1.1, low=0.5) == [0.0] * 4  # rejected, not truncated
    assert w("geo_mask", low=0.99, high=1.05) == [1.0] * 4 and 0.99 < geo < 1.05
    assert w("geo_mask", low=0.99, high=1.01) == [0.0] * 4
    assert w("icepop", low=0.5, high=2.0) == [1.5, 0.0, 0.0, 1.0]
    assert w("outlier_mask", cap=2.0, low=0.1, high=5.0) == [1.5, 0.25, 2.0, 1.0]
    assert w("outlier_mask", cap=2.0, low=0.3, high=5.0) == [0.0] * 4  # 0.25 vetoes the sample
    with pytest.raises(ValueError, match="unknown off-policy correction"):
        Correction("clip_everything")
    with pytest.raises(ValueError, match="low <= 1 <= high"):
        Correction("icepop", low=1.5)


def test_the_loss_carries_the_weights_and_masked_tokens_give_no_gradient():
    logprobs = OLD.clone().requires_grad_(True)
    terms = [SampleTerms(logprobs, OLD, ROLLOUT, torch.ones(4), weight=0.25)]
    loss, stats = policy_loss(terms, LossConfig(kind="ppo", correction=Correction("icepop"), dual_clip=None))
    loss.backward()
    # at ratio 1 against old, each PPO token's gradient is -A * weight * token weight
    assert logprobs.grad.tolist() == pytest.approx([-0.25 * 1.5, 0.0, 0.0, -0.25 * 1.0])
    assert stats["masked"] == 2 and stats["tis_mean"] == pytest.approx(2.5)
    # tis_cap stays the token-TIS shorthand; None: no correction at all
    assert LossConfig(tis_cap=3.0).correction == Correction("tis", cap=3.0)
    assert LossConfig(tis_cap=None).correction is None


def test_cispo_keeps_every_tokens_gradient_through_log_p_weighted_by_the_clipped_ratio():
    old = torch.tensor([-1.0, -1.0, -1.0])
    logprobs = (old + torch.log(torch.tensor([1.0, 2.0, 0.5]))).requires_grad_(True)
    adv = torch.tensor([1.0, 1.0, -1.0])
    terms = [SampleTerms(logprobs, old, old, adv, weight=1.0)]
    loss, _ = policy_loss(terms, LossConfig(kind="cispo", clip_low=0.2, clip_high=0.28, tis_cap=None))
    loss.backward()
    # d/dlogp of -sg(clip(r)) * A * logp = -clip(r) * A: r = 1, 2 -> 1.28, 0.5 -> 0.8
    assert logprobs.grad.tolist() == pytest.approx([-1.0, -1.28, 0.8])
    # PPO's clip zeroes the second token's gradient (A > 0, r above the range); CISPO does not
    ppo = logprobs.detach().clone().requires_grad_(True)
    policy_loss([SampleTerms(ppo, old, old, adv, 1.0)], LossConfig(kind="ppo", dual_clip=None, tis_cap=None))[
        0
    ].backward()
    assert ppo.grad[1] == 0.0


def test_mismatch_statistics_and_ratio_quantiles():
    sums = mismatch(OLD, ROLLOUT)
    logs = [math.log(r) for r in RATIOS]
    assert sums["mismatch_k1"] == pytest.approx(-sum(logs))
    assert sums["mismatch_k3"] == pytest.approx(sum(r - 1 - lr for r, lr in zip(RATIOS, logs)))
    assert sum(sums[k] for k in HIST_KEYS) == 4
    # on policy: every log ratio is 0, in the bin centred on 0
    on_policy = mismatch(ROLLOUT, ROLLOUT)
    assert ratio_quantiles(on_policy) == [1.0, 1.0, 1.0] and on_policy["mismatch_k3"] == 0.0
    low, mid, high = ratio_quantiles(sums)
    assert low == pytest.approx(math.exp(-1.4)) and high == pytest.approx(math.exp(1.1))
    assert ratio_quantiles({}) == [None, None, None]


def test_the_recipe_takes_one_correction():
    assert LossSection(correction={"name": "icepop", "low": 0.5, "high": 5.0}).correction.name == "icepop"
    with pytest.raises(ValueError, match="keep one"):
        LossSection(tis_cap=2.0, correction={"name": "seq_tis"})
    assert LossSection(tis_cap=None, correction={"name": "seq_tis"}).correction.cap == 2.0
    assert LossSection(kind="cispo").kind == "cispo"
