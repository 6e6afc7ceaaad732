"""Policy losses: PPO clip with dual clip, GSPO, truncated IS, KL; and the invariant that
splitting a batch into microbatches trains the same (TRL-style)."""

from __future__ import annotations

import pytest
import torch

from roost.trainer.losses import LossConfig, SampleTerms, policy_loss, token_weights
from roost.trainer.recipe import LossSection


def terms(logprob, old, adv, rollout=None, weight=1.0, ref=None):
    t = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
    return SampleTerms(
        logprobs=t(logprob).requires_grad_(),
        old_logprobs=t(old),
        rollout_logprobs=t(rollout if rollout is not None else old),
        advantages=t(adv),
        weight=weight,
        ref_logprobs=None if ref is None else t(ref),
    )


def value(config, *items):
    loss, _ = policy_loss(list(items), config)
    return float(loss.detach())


def test_ppo_clip_and_dual_clip():
    log = torch.log
    cfg = LossConfig(kind="ppo", clip_low=0.2, clip_high=0.2, dual_clip=3.0, tis_cap=None)
    # ratio 1.5 with A > 0: clipped to 1.2
    assert value(cfg, terms([float(log(torch.tensor(1.5)))], [0.0], [1.0])) == pytest.approx(-1.2)
    # ratio 0.5 with A < 0: max(0.5, 0.8) * 1 = 0.8
    assert value(cfg, terms([float(log(torch.tensor(0.5)))], [0.0], [-1.0])) == pytest.approx(0.8)
    # ratio 5 with A < 0: 5 capped by dual clip at 3
    assert value(cfg, terms([float(log(torch.tensor(5.0)))], [0.0], [-1.0])) == pytest.approx(3.0, rel=1e-6)
    no_dual = LossConfig(kind="ppo", dual_clip=None, tis_cap=None)
    assert value(no_dual, terms([float(log(torch.tensor(5.0)))], [0.0], [-1.0])) == pytest.approx(5.0, rel=1e-6)


def test_truncated_importance_sampling_weights_by_old_over_rollout():
    cfg = LossConfig(kind="ppo", tis_cap=2.0, dual_clip=None)
    # on-policy ratio 1; old/rollout = e^1 = 2.718 capped at 2
    assert value(cfg, terms([0.0], [0.0], [1.0], rollout=[-1.0])) == pytest.approx(-2.0)
    assert value(cfg, terms([0.0], [0.0], [1.0], rollout=[0.5])) == pytest.approx(-torch.exp(torch.tensor(-0.5)).item())


def test_gspo_uses_the_sequence_ratio():
    cfg = LossConfig(kind="gspo", tis_cap=None)
    t = terms([0.1, -0.1], [0.0, 0.0], [1.0, 1.0])
    loss, _ = policy_loss([t], cfg)
    assert float(loss) == pytest.approx(-2.0)  # mean log ratio 0: s = 1, inside the clip
    loss.backward()
    assert t.logprobs.grad.tolist() == pytest.approx([-1.0, -1.0])


def test_kl_to_reference_k3():
    cfg = LossConfig(kind="grpo", kl_coef=0.5, tis_cap=None)
    loss = value(cfg, terms([0.0], [0.0], [0.0], ref=[-1.0]))
    assert loss == pytest.approx(0.5 * (torch.exp(torch.tensor(-1.0)).item() + 1 - 1))
    with pytest.raises(ValueError, match="reference"):
        value(cfg, terms([0.0], [0.0], [0.0]))


def test_aggregations():
    assert token_weights([2, 3, 0], "token_mean") == pytest.approx([0.2, 0.2, 0.2])
    assert token_weights([2, 4], "seq_mean_token_mean") == pytest.approx([0.25, 0.125])
    assert LossConfig(kind="grpo").aggregation == "seq_mean_token_mean"
    with pytest.raises(ValueError, match="nothing to train on"):
        token_weights([0, 0], "token_mean")
    with pytest.raises(ValueError, match="dual_clip"):
        LossConfig(dual_clip=0.5)


@pytest.mark.parametrize("kind", ["ppo", "grpo", "gspo"])
def test_microbatching_does_not_change_the_loss_or_gradient(kind):
    gen = torch.Generator().manual_seed(0)
    lengths = [3, 5, 2, 4]
    cfg = LossConfig(kind=kind, tis_cap=2.0)
    weights = token_weights(lengths, cfg.aggregation)
    params = [torch.randn(n, generator=gen).requires_grad_() for n in lengths]
    olds = [p.detach() + 0.1 * torch.randn(p.shape, generator=gen) for p in params]
    rollouts = [o + 0.1 * torch.randn(o.shape, generator=gen) for o in olds]
    advs = [torch.randn(1, generator=gen).expand(n).clone() for n in lengths]

    def make(i):
        return SampleTerms(params[i], olds[i], rollouts[i], advs[i], weights[i])

    whole, _ = policy_loss([make(i) for i in range(4)], cfg)
    whole_grads = torch.autograd.grad(whole, params)
    split = sum(policy_loss([make(i) for i in ids], cfg)[0] for ids in ([0, 3], [1], [2]))
    split_grads = torch.autograd.grad(split, params)
    assert float(split) == pytest.approx(float(whole), rel=1e-6)
    for a, b in zip(whole_grads, split_grads):
        torch.testing.assert_close(a, b)


def test_a_loss_config_without_a_recipe_has_the_recipes_defaults():
    assert LossConfig() == LossConfig(**LossSection().model_dump())
    assert LossConfig().clip_high == 0.28
