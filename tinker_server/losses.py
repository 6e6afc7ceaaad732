"""Tinker's built-in losses over per-token logprobs, as its docs define them.

Each loss is a plain sum over the datum's tokens (Tinker does no averaging; the client scales its
advantages or weights). `importance_sampling` and `ppo` are roost's own `policy_loss` (kind `ppo`):
Tinker's ratio bounds `clip_low_threshold`/`clip_high_threshold` are roost's `1 - clip_low` and
`1 + clip_high`, and importance sampling is the same loss with the clip open. `cispo` and `dro`
have no roost counterpart and are written here in its style.

Per-token inputs (one value per input token): `target_tokens`, and for the RL losses `logprobs`
(the sampler's logprobs of the targets) and `advantages`; `cross_entropy` takes `weights`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .codec import Datum
from .futures import RequestFailure

RL_INPUTS = ("target_tokens", "logprobs", "advantages")
INPUTS = {
    "cross_entropy": ("target_tokens",),
    "importance_sampling": RL_INPUTS,
    "ppo": RL_INPUTS,
    "cispo": RL_INPUTS,
    "dro": RL_INPUTS,
}
"""The losses served, with the loss_fn_inputs each needs."""

CONFIG_KEYS = {
    "cross_entropy": {},
    "importance_sampling": {},
    "ppo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    "cispo": {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0},
    "dro": {"beta": None},
}
"""Each loss's loss_fn_config keys and defaults (None: required). Tinker's: PPO clips at 0.8 and 1.2;
CISPO's clip is one-sided by default, the lower bound off and the upper at 4 (tinker-cookbook's
loss-functions tutorial, after MiniMax-M1 and ScaleRL)."""


class LossInputError(ValueError):
    """A loss name, config or input the server cannot use (HTTP 400); the message says what to send."""


@dataclass
class DatumInputs:
    """One datum's per-token loss inputs, as tensors."""

    targets: list[int]
    weights: torch.Tensor
    sampling_logprobs: torch.Tensor | None
    advantages: torch.Tensor | None


def loss_config(loss_fn: str, given: dict[str, float]) -> dict[str, float]:
    """The loss's config with defaults filled in; `LossInputError` names an unknown or missing key."""
    if loss_fn not in INPUTS:
        raise LossInputError(
            f"loss_fn {loss_fn!r} is not served; this server runs {sorted(INPUTS)} (docs/tinker.md); "
            "for a loss of your own pass a Python function to forward_backward_custom (uploaded losses, "
            "create_custom_loss, are not served)"
        )
    keys = CONFIG_KEYS[loss_fn]
    unknown = sorted(set(given) - set(keys))
    if unknown:
        raise LossInputError(f"loss_fn_config keys {unknown} are not used by {loss_fn}; it takes {sorted(keys)}")
    config = {**keys, **given}
    missing = sorted(k for k, v in config.items() if v is None)
    if missing:
        raise LossInputError(f"{loss_fn} needs loss_fn_config {missing}, e.g. {{'beta': 0.05}}")
    if "clip_low_threshold" in config and not 0 <= config["clip_low_threshold"] <= 1 <= config["clip_high_threshold"]:
        raise LossInputError(
            f"{loss_fn}: clip thresholds {config['clip_low_threshold']}, {config['clip_high_threshold']} must bound "
            "the ratio 1 (0 <= clip_low_threshold <= 1 <= clip_high_threshold), e.g. 0.8 and 1.2"
        )
    return {k: float(v) for k, v in config.items()}


def datum_inputs(loss_fn: str, datum: Datum, index: int) -> DatumInputs:
    """The datum's inputs for `loss_fn`, each one value per input token (`RequestFailure` if not)."""
    n = len(datum.tokens)
    missing = [name for name in INPUTS[loss_fn] if name not in datum.inputs]
    if missing:
        raise RequestFailure(f"datum {index} has no loss_fn_inputs {missing}; {loss_fn} needs {list(INPUTS[loss_fn])}")
    values = {name: datum.inputs[name].reshape(-1) for name in (*INPUTS[loss_fn], "weights") if name in datum.inputs}
    if any(len(v) != n for v in values.values()):
        lengths = " and ".join(f"{len(v)} {name}" for name, v in values.items())
        raise RequestFailure(f"datum {index}: {n} input tokens but {lengths}; give one value per input token")

    def tensor(name: str) -> torch.Tensor | None:
        return torch.from_numpy(values[name].astype(np.float32)) if name in values else None

    weights = tensor("weights")
    return DatumInputs(
        targets=[int(t) for t in values["target_tokens"]],
        weights=torch.ones(n) if weights is None else weights,
        sampling_logprobs=tensor("logprobs"),
        advantages=tensor("advantages"),
    )


def elementwise_loss(loss_fn: str, logprobs: torch.Tensor, inputs: DatumInputs, config: dict[str, float]):
    """Each token's loss (its sum is the datum's loss), differentiable in `logprobs`."""
    from roost.trainer.losses import LossConfig, SampleTerms, new_stats, token_losses

    if loss_fn == "cross_entropy":
        return -inputs.weights.to(logprobs.device) * logprobs
    sampling, adv = inputs.sampling_logprobs.to(logprobs.device), inputs.advantages.to(logprobs.device)
    if loss_fn in ("importance_sampling", "ppo"):
        low, high = (0.0, math.inf) if loss_fn == "importance_sampling" else _bounds(config)
        ppo = LossConfig(kind="ppo", clip_low=1 - low, clip_high=high - 1, dual_clip=None, tis_cap=None, kl_coef=0.0)
        return token_losses(SampleTerms(logprobs, sampling, sampling, adv, 1.0), ppo, new_stats())
    ratio = torch.exp(logprobs - sampling)
    if loss_fn == "cispo":
        low, high = _bounds(config)
        return -ratio.clamp(low, high).detach() * logprobs * adv
    return -(logprobs * adv - 0.5 * config["beta"] * (logprobs - sampling) ** 2)  # dro


def _bounds(config: dict[str, float]) -> tuple[float, float]:
    return config["clip_low_threshold"], config["clip_high_threshold"]
