"""`forward_backward_custom` through the pinned SDK: the SDK runs a `forward`, the user's loss on
torch logprobs, and a `cross_entropy` `forward_backward` whose weights are the loss's gradient
(`-dC/dlogprobs`). Its optimizer step equals the one `cross_entropy` takes with those weights:
-Σ w·logprobs gives cross_entropy's step with w, and (Σ -w·logprobs)² / 2 cross_entropy's step
with w scaled by the loss; the surrogate's loss shows the scale of the weights the server got."""

from __future__ import annotations

import numpy as np
import pytest

from .test_sdk_training import _batch, _datum

tinker = pytest.importorskip("tinker")

ADAM = tinker.types.AdamParams(learning_rate=2e-2)


def _weighted_nll(data, logprobs_list):
    import torch

    return torch.stack(
        [-(d.loss_fn_inputs["weights"].to_torch() * lp).sum() for d, lp in zip(data, logprobs_list)]
    ).sum()


def _linear(data, logprobs_list):
    loss = _weighted_nll(data, logprobs_list)
    return loss, {"nll": float(loss.detach())}


def _squared(data, logprobs_list):
    loss = _weighted_nll(data, logprobs_list)
    return loss**2 / 2, {}


def _scaled(data, factor: float):
    return [
        tinker.types.Datum(
            model_input=d.model_input,
            loss_fn_inputs={
                "target_tokens": d.loss_fn_inputs["target_tokens"],
                "weights": tinker.types.TensorData.from_numpy(d.loss_fn_inputs["weights"].to_numpy() * factor),
            },
        )
        for d in data
    ]


def _logprobs_after(training, data) -> list[np.ndarray]:
    return [o["logprobs"].to_numpy() for o in training.forward(data, "cross_entropy").result().loss_fn_outputs]


def test_a_custom_loss_steps_as_cross_entropy_with_its_gradient_as_weights(service):
    data = [_datum(p, c) for p, c in _batch(seed=4)]
    models = [service.create_lora_training_client(base_model="tiny", rank=4, seed=1).result() for _ in range(4)]
    linear, plain, squared, scaled = models
    nll = plain.forward(data, "cross_entropy").result().metrics["loss:sum"]

    custom = linear.forward_backward_custom(data, _linear).result()
    assert custom.metrics["loss:sum"] == pytest.approx(nll, rel=1e-5) and custom.metrics["nll"] == pytest.approx(nll)
    plain.forward_backward(data, "cross_entropy").result()
    squared_out = squared.forward_backward_custom(data, _squared).result()
    assert squared_out.metrics["loss:sum"] == pytest.approx(nll**2 / 2, rel=1e-5)
    # the server's backward ran cross_entropy with weights w (linear) and nll * w (squared): Adam's
    # first step hardly sees a gradient's scale, the surrogate's loss does
    assert custom.metrics["surrogate_loss:sum"] == pytest.approx(nll, rel=1e-5)
    assert squared_out.metrics["surrogate_loss:sum"] == pytest.approx(nll**2, rel=1e-5)
    scaled.forward_backward(_scaled(data, nll), "cross_entropy").result()
    for model in models:
        model.optim_step(ADAM).result()

    after = [_logprobs_after(m, data) for m in models]
    for got, want in [(after[0], after[1]), (after[2], after[3])]:
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, atol=1e-5)
    untrained = _logprobs_after(service.create_lora_training_client(base_model="tiny", rank=4, seed=1).result(), data)
    assert max(np.abs(a - u).max() for a, u in zip(after[0], untrained)) > 1e-3  # the step moved the weights
