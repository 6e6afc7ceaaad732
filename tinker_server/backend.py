"""`TrainingBackend`: what the Tinker routes need of a trainer, and roost's Megatron one.

The Megatron backend trains every weight (the `full_weight` capability); a LoRA backend is a
second implementation of the same protocol once the trainer's adapter layer lands, chosen in
`app.make_backend` by the request's `lora_config`.

Gradients of `forward_backward` calls add up in the model's gradient buffers until `optim_step`
applies them with that call's Adam settings and clears them: Tinker's chunked calls of one batch
give the same step as one call of the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from .codec import Datum
from .futures import RequestFailure
from .wire import AdamParams


@dataclass
class LossResult:
    """Per datum: the logprob of each target token and its weighted loss; the call's loss (summed)."""

    logprobs: list[np.ndarray]
    elementwise_loss: list[np.ndarray]
    loss: float


class TrainingBackend(Protocol):
    lora: bool
    """True when only adapter weights train."""

    def cross_entropy(self, data: list[Datum], backward: bool) -> LossResult: ...

    def optim_step(self, adam: AdamParams) -> dict[str, float]: ...

    def export(self, folder: Path) -> Path:
        """Write the current weights as a Hugging Face folder the engine loads."""
        ...


def cross_entropy_inputs(datum: Datum, index: int) -> tuple[list[int], np.ndarray]:
    """The datum's target tokens and weights, checked against its input length."""
    n = len(datum.tokens)
    if "target_tokens" not in datum.inputs:
        raise RequestFailure(f"datum {index} has no loss_fn_inputs['target_tokens']; cross_entropy needs them")
    targets = datum.inputs["target_tokens"].reshape(-1)
    weights = datum.inputs.get("weights", np.ones(n, dtype=np.float32)).reshape(-1)
    if len(targets) != n or len(weights) != n:
        raise RequestFailure(
            f"datum {index}: {n} input tokens but {len(targets)} target_tokens and {len(weights)} weights; "
            "give one target and one weight per input token"
        )
    return [int(t) for t in targets], weights.astype(np.float32)


class MegatronBackend:
    """Full-weight training with roost's `MegatronPolicy` (one process, tp=1)."""

    lora = False

    def __init__(self, checkpoint: str, token_budget: int = 8192):
        from roost.trainer.megatron import parallel
        from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

        parallel.init(tp=1)
        # Tinker's AdamParams default to no clipping; each optim_step sets its own.
        self.policy = MegatronPolicy(TrainConfig(checkpoint=checkpoint, layout="flat", token_budget=token_budget))
        self.vocab_size = self.policy.spec.vocab_size
        self.accumulated = 0

    def _microbatch(self, data: list[Datum]):
        from roost.trainer.prefix_tree import Microbatch

        width = max(len(d.tokens) for d in data)
        rows = torch.zeros((len(data), width), dtype=torch.long)
        score_rows, targets, sample_scores = [], [], []
        for row, datum in enumerate(data):
            tokens = datum.tokens
            wanted, _ = cross_entropy_inputs(datum, row)
            if max(tokens + wanted, default=0) >= self.vocab_size or min(tokens + wanted, default=0) < 0:
                raise RequestFailure(f"datum {row} has a token outside the vocabulary [0, {self.vocab_size})")
            rows[row, : len(datum.tokens)] = torch.tensor(datum.tokens, dtype=torch.long)
            start = len(score_rows)
            score_rows += [row * width + i for i in range(len(datum.tokens))]
            targets += wanted
            sample_scores.append(torch.arange(start, len(score_rows)))
        return Microbatch(
            input_ids=rows,
            position_ids=torch.arange(width).expand(len(data), width).contiguous(),
            tree=None,
            score_rows=torch.tensor(score_rows, dtype=torch.long),
            score_targets=torch.tensor(targets, dtype=torch.long),
            sample_index=list(range(len(data))),
            sample_scores=sample_scores,
            num_tokens=sum(len(d.tokens) for d in data),
            layout="flat",
        )

    def cross_entropy(self, data: list[Datum], backward: bool) -> LossResult:
        from roost.trainer.megatron.model import scored_logprobs

        if not data or any(not d.tokens for d in data):
            raise RequestFailure("forward_backward needs at least one datum, each with at least one token")
        weights = [torch.from_numpy(cross_entropy_inputs(d, i)[1]) for i, d in enumerate(data)]
        microbatch = self._microbatch(data)
        if backward and self.accumulated == 0:
            self.policy.model.zero_grad_buffer()
            self.policy.optimizer.zero_grad()
        with torch.set_grad_enabled(backward):
            values = scored_logprobs(self.policy.model, microbatch, self.policy.inv_freq)
            per_datum = microbatch.sample_logprobs(values)
            loss = -sum((w.to(lp.device) * lp).sum() for w, lp in zip(weights, per_datum))
            if backward:
                loss.backward()
                self.accumulated += 1
        logprobs = [lp.detach().float().cpu().numpy() for lp in per_datum]
        elementwise = [-w.numpy() * lp for w, lp in zip(weights, logprobs)]
        return LossResult(logprobs, elementwise, float(loss.detach()))

    def optim_step(self, adam: AdamParams) -> dict[str, float]:
        from megatron.core.distributed import finalize_model_grads

        if self.accumulated == 0:
            raise RequestFailure(
                "optim_step with no gradients accumulated; call forward_backward first (forward alone adds none)"
            )
        for optimizer in getattr(self.policy.optimizer, "chained_optimizers", [self.policy.optimizer]):
            optimizer.config.clip_grad = adam.grad_clip_norm
            for group in optimizer.optimizer.param_groups:
                group.update(
                    lr=adam.learning_rate, betas=(adam.beta1, adam.beta2), eps=adam.eps, weight_decay=adam.weight_decay
                )
        finalize_model_grads([self.policy.model])
        updated, grad_norm, _ = self.policy.optimizer.step()
        self.accumulated = 0
        self.policy.steps += int(bool(updated))
        return {"grad_norm:mean": float(grad_norm or 0.0), "updated:sum": float(bool(updated))}

    def export(self, folder: Path) -> Path:
        return self.policy.export_hf(folder)
