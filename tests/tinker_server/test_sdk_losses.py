"""Tinker's RL losses through the pinned SDK on `roost tinker serve`: `importance_sampling` and
`ppo` are roost's own policy loss on the same inputs (the loss, and the step it takes: a probe's
logprobs after one step equal roost's trainer after one step of its ppo loss), `cispo` and `dro`
are the formulas of Tinker's docs, and a loss or config the server cannot run is refused."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from .test_sdk_training import _batch, _datum, tinker_lora_spec

tinker = pytest.importorskip("tinker")

ADAM = {"learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-2, "grad_clip_norm": 1.0}


def _loss_config(loss_fn: str, tinker_config: dict[str, float]):
    """roost's LossConfig for a Tinker loss: the ratio clip [low, high] is [1 - clip_low, 1 + clip_high]."""
    from roost.trainer.losses import LossConfig

    if loss_fn == "importance_sampling":
        low, high = 0.0, math.inf
    else:
        low, high = tinker_config.get("clip_low_threshold", 0.8), tinker_config.get("clip_high_threshold", 1.2)
    return LossConfig(kind="ppo", clip_low=1 - low, clip_high=high - 1, dual_clip=None, tis_cap=None)


CASES = [
    ("importance_sampling", {}),
    ("ppo", {}),
    ("ppo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.05}),
]


def _tensor(values, dtype="float32"):
    return tinker.types.TensorData(data=list(values), dtype=dtype, shape=[len(values)])


def _rl_datum(prompt, completion, sampler_logprobs, advantages):
    """Prompt positions get advantage 0 (Tinker's way to leave them out of an RL loss)."""
    tokens = prompt + completion
    pad = [0.0] * (len(prompt) - 1)
    return tinker.types.Datum(
        model_input=tinker.types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": _tensor(tokens[1:], "int64"),
            "logprobs": _tensor(pad + list(sampler_logprobs)),
            "advantages": _tensor(pad + list(advantages)),
        },
    )


def _current(training, batch) -> list[np.ndarray]:
    out = training.forward([_datum(p, c) for p, c in batch], "cross_entropy").result()
    return [o["logprobs"].to_numpy()[len(p) - 1 :] for (p, _), o in zip(batch, out.loss_fn_outputs)]


def _rollouts(current: list[np.ndarray], seed: int):
    """Sampler logprobs off the current ones (ratios from about 0.67 to 1.5, so the clips bite) and
    advantages of both signs, per completion token."""
    rng = random.Random(seed)
    sampler = [[float(x) + rng.uniform(-0.4, 0.4) for x in lp] for lp in current]
    advantages = [[rng.choice((-1, 1)) * rng.uniform(0.5, 1.5) for _ in lp] for lp in current]
    return sampler, advantages


@pytest.mark.parametrize(("loss_fn", "config"), CASES)
def test_the_rl_loss_is_roosts_policy_loss_on_the_same_inputs(service, loss_fn, config):
    from roost.trainer.losses import SampleTerms, policy_loss

    training = service.create_lora_training_client(base_model="tiny", rank=4).result()
    batch = _batch(seed=11)
    current = _current(training, batch)
    sampler, advantages = _rollouts(current, seed=12)
    data = [_rl_datum(p, c, s, a) for (p, c), s, a in zip(batch, sampler, advantages)]
    out = training.forward(data, loss_fn, loss_fn_config=config or None).result()

    terms = [
        SampleTerms(torch.tensor(lp), torch.tensor(s), torch.tensor(s), torch.tensor(a), 1.0)
        for lp, s, a in zip(current, sampler, advantages)
    ]
    expected, stats = policy_loss(terms, _loss_config(loss_fn, config))
    if loss_fn == "ppo":
        assert stats["clip_fraction"] > 0  # the clip is in play, so its thresholds are checked
    assert out.metrics["loss:sum"] == pytest.approx(float(expected), rel=1e-5)
    for (prompt, _), output, lp, s, a in zip(batch, out.loss_fn_outputs, current, sampler, advantages):
        elementwise = output["elementwise_loss"].to_numpy()
        assert np.all(elementwise[: len(prompt) - 1] == 0)
        alone, _ = policy_loss(
            [SampleTerms(torch.tensor(lp), torch.tensor(s), torch.tensor(s), torch.tensor(a), 1.0)],
            _loss_config(loss_fn, config),
        )
        assert elementwise.sum() == pytest.approx(float(alone), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize(("loss_fn", "config"), [CASES[0], CASES[2]])
def test_a_step_of_the_rl_loss_trains_as_roosts_ppo_step(service, tiny_model_path, megatron_world, loss_fn, config):
    """forward_backward with advantages / N, then optim_step, moves the adapters as one step of roost's
    trainer with its ppo loss (token mean: weight 1/N) against the same rollout logprobs."""
    from roost.rollout.store.samples import Sample
    from roost.trainer.advantages import Scored
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    training = service.create_lora_training_client(base_model="tiny", rank=4).result()
    batch, probe = _batch(seed=13), _batch(seed=14)
    current, before = _current(training, batch), _current(training, probe)
    sampler, advantages = _rollouts(current, seed=15)
    n = sum(len(c) for _, c in batch)
    scaled = [[x / n for x in a] for a in advantages]
    data = [_rl_datum(p, c, s, a) for (p, c), s, a in zip(batch, sampler, scaled)]
    training.forward_backward(data, loss_fn, loss_fn_config=config or None).result()
    training.optim_step(tinker.types.AdamParams(**ADAM)).result()

    policy = MegatronPolicy(
        TrainConfig(
            checkpoint=str(tiny_model_path),
            lr=ADAM["learning_rate"],
            adam_betas=(ADAM["beta1"], ADAM["beta2"]),
            layout="flat",
            old_logprobs="rollout",
            loss=_loss_config(loss_fn, config),
            lora=tinker_lora_spec(),
        )
    )
    for group in policy.optimizer.param_groups:
        group["eps"] = ADAM["eps"]
    scored = [
        Scored(Sample.from_turns([(p, c, s)], session_id=f"s{i}", group_id=f"g{i}"), [0.0] * len(p) + a)
        for i, ((p, c), s, a) in enumerate(zip(batch, sampler, advantages))
    ]
    policy.train_step(scored)

    out = training.forward([_datum(p, c) for p, c in probe], "cross_entropy").result()
    ours = policy.logprobs(
        [Sample.from_turns([(p, c, [0.0] * len(c))], session_id="p", group_id="p") for p, c in probe]
    )
    moved = False
    for (prompt, _), output, expected, was in zip(probe, out.loss_fn_outputs, ours, before):
        got = output["logprobs"].to_numpy()[len(prompt) - 1 :]
        np.testing.assert_allclose(got, expected.numpy(), atol=1e-4)
        moved |= bool(np.abs(got - was).max() > 1e-3)
    assert moved, "the step left the probe's logprobs where they were: the test would pass for any loss"


def test_cispo_and_dro_are_tinkers_formulas(service):
    training = service.create_lora_training_client(base_model="tiny", rank=4).result()
    batch = _batch(seed=16)
    current = _current(training, batch)
    sampler, advantages = _rollouts(current, seed=17)
    data = [_rl_datum(p, c, s, a) for (p, c), s, a in zip(batch, sampler, advantages)]
    lp, s, a = (np.concatenate([np.asarray(x, dtype=np.float64) for x in xs]) for xs in (current, sampler, advantages))

    cispo = training.forward(data, "cispo", loss_fn_config={"clip_low_threshold": 0.9, "clip_high_threshold": 1.1})
    ratio = np.clip(np.exp(lp - s), 0.9, 1.1)
    assert cispo.result().metrics["loss:sum"] == pytest.approx(float(-(ratio * lp * a).sum()), rel=1e-4)
    # Tinker's default CISPO clip is one-sided: the lower bound off, the upper at 4
    default = training.forward(data, "cispo").result().metrics["loss:sum"]
    raw = np.exp(lp - s)
    assert raw.min() < 0.8 or raw.max() > 1.2, "no ratio outside PPO's clip: the default would go untested"
    assert default == pytest.approx(float(-(np.clip(raw, 0.0, 4.0) * lp * a).sum()), rel=1e-4)

    # dro's quadratic term counts every position, the prompt's too (there the sampler logprob is 0)
    full = training.forward([_datum(p, c) for p, c in batch], "cross_entropy").result().loss_fn_outputs
    lp = np.concatenate([o["logprobs"].to_numpy().astype(np.float64) for o in full])
    s, a = (np.concatenate([[0.0] * (len(p) - 1) + x for (p, _), x in zip(batch, xs)]) for xs in (sampler, advantages))
    dro = training.forward(data, "dro", loss_fn_config={"beta": 0.5}).result()
    expected = -(lp * a - 0.5 * 0.5 * (lp - s) ** 2).sum()
    assert dro.metrics["loss:sum"] == pytest.approx(float(expected), rel=1e-4)


def test_a_loss_or_config_the_server_cannot_run_is_refused(service):
    training = service.create_lora_training_client(base_model="tiny", rank=4).result()
    batch = _batch(seed=18)
    sampler, advantages = _rollouts(_current(training, batch), seed=19)
    data = [_rl_datum(p, c, s, a) for (p, c), s, a in zip(batch, sampler, advantages)]
    with pytest.raises(tinker.BadRequestError, match=r"loss_fn 'gspo' is not served; this server runs \["):
        training.forward(data, "gspo").result()
    with pytest.raises(tinker.BadRequestError, match=r"dro needs loss_fn_config \['beta'\]"):
        training.forward(data, "dro").result()
    with pytest.raises(tinker.BadRequestError, match=r"keys \['clip'\] are not used by ppo"):
        training.forward(data, "ppo", loss_fn_config={"clip": 0.2}).result()
    with pytest.raises(tinker.RequestFailedError, match=r"has no loss_fn_inputs \['logprobs', 'advantages'\]"):
        training.forward([_datum(*batch[0])], "importance_sampling").result()
    assert training.forward(data, "ppo").result().metrics["loss:sum"] != 0
