"""`TrainingBackend`: what the Tinker routes need of a trainer, and roost's Megatron one.

`MegatronBackend` trains LoRA adapters (only they are in the optimizer) when given a `LoraSpec`,
else every weight. Gradients of `forward_backward` calls add up in the model's gradient buffers
until `optim_step` applies them with that call's Adam settings and clears them: Tinker's chunked
calls of one batch give the same step as one call of the whole batch.

A saved state (`save_state`) is a folder: `adapter/` (PEFT layout) or `weights/` (a Hugging Face
checkpoint) and `optimizer.pt` (Adam's moments and step counts). Loading one builds a new backend
from it, so a load leaves nothing of the old weights or moments behind.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from roost.rollout.lora import LoraSpec

from . import losses
from .codec import Datum
from .futures import RequestFailure
from .wire import AdamParams, LoraConfig

ADAPTER_DIR = "adapter"
"""The adapter folder inside a LoRA model's sampler save and state save."""
WEIGHTS_DIR = "weights"
OPTIMIZER_FILE = "optimizer.pt"
TINKER_LORA_ALPHA = 32.0
"""Tinker's fixed LoRA alpha (its API takes only the rank)."""


def lora_spec(config: LoraConfig) -> LoraSpec:
    """The adapters a Tinker `LoraConfig` asks for: attention and MLP projections and the
    unembedding, each as its `train_*` flag says."""
    from roost.rollout.lora import ATTENTION_TARGETS, MLP_TARGETS, UNEMBEDDING_TARGET

    targets = (
        *(ATTENTION_TARGETS if config.train_attn else ()),
        *(MLP_TARGETS if config.train_mlp else ()),
        *((UNEMBEDDING_TARGET,) if config.train_unembed else ()),
    )
    return LoraSpec(rank=config.rank, alpha=TINKER_LORA_ALPHA, targets=targets)


@dataclass
class LossResult:
    """Per datum: the logprob of each target token and its weighted loss; the call's loss (summed)."""

    logprobs: list[np.ndarray]
    elementwise_loss: list[np.ndarray]
    loss: float


class TrainingBackend(Protocol):
    lora: LoraSpec | None
    """The adapters that train; None when every weight trains."""

    def forward_backward(
        self, data: list[Datum], loss_fn: str, config: dict[str, float], backward: bool
    ) -> LossResult: ...

    def optim_step(self, adam: AdamParams) -> dict[str, float]: ...

    @property
    def steps(self) -> int:
        """The optim_steps that changed the weights since this backend was built."""
        ...

    def export(self, folder: Path) -> Path:
        """Write the weights the engine samples: with LoRA the adapter alone, in PEFT's layout, in
        `folder/adapter` (the engine loads it onto the base model); else a Hugging Face folder."""
        ...

    def save_state(self, folder: Path) -> Path:
        """Write the trained weights and the optimizer's state to `folder`."""
        ...

    def export_external(self, folder: Path) -> Path:
        """Write the trained weights as others load them: the adapter alone in PEFT's layout with
        LoRA, else the whole Hugging Face checkpoint."""
        ...


class MegatronBackend:
    """Training with roost's `MegatronPolicy` (one process, tp=1): LoRA adapters when `lora` is
    set, started from `adapter` (a PEFT folder) or fresh from `seed`; else every weight of
    `checkpoint`. `optimizer`: an `optimizer.pt` of a saved state to restore Adam from."""

    def __init__(
        self,
        checkpoint: Path,
        lora: LoraSpec | None = None,
        *,
        seed: int = 0,
        adapter: Path | None = None,
        optimizer: Path | None = None,
        token_budget: int = 8192,
    ):
        from roost.trainer.megatron import parallel
        from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

        parallel.init(tp=1)
        self.lora = lora
        fresh = None
        if lora is not None and adapter is None:
            fresh = adapter = _fresh_adapter(checkpoint, lora, seed)
        try:
            config = TrainConfig(
                checkpoint=str(checkpoint), layout="flat", token_budget=token_budget, lora=lora, adapter=_str(adapter)
            )
            # Tinker's AdamParams default to no clipping; each optim_step sets its own.
            self.policy = MegatronPolicy(config)
        finally:
            if fresh is not None:
                shutil.rmtree(fresh.parent, ignore_errors=True)
        if optimizer is not None:
            self.policy.optimizer.load_state_dict(torch.load(optimizer, weights_only=False))
        self.vocab_size = self.policy.spec.vocab_size
        self.accumulated = 0

    def _microbatch(self, data: list[Datum], targets_of: list[list[int]]):
        from roost.trainer.prefix_tree import Microbatch

        width = max(len(d.tokens) for d in data)
        rows = torch.zeros((len(data), width), dtype=torch.long)
        score_rows, targets, sample_scores = [], [], []
        for row, (datum, wanted) in enumerate(zip(data, targets_of)):
            tokens = datum.tokens
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

    def forward_backward(self, data: list[Datum], loss_fn: str, config: dict[str, float], backward: bool) -> LossResult:
        from roost.trainer.megatron.model import scored_logprobs

        if not data or any(not d.tokens for d in data):
            raise RequestFailure("forward_backward needs at least one datum, each with at least one token")
        inputs = [losses.datum_inputs(loss_fn, d, i) for i, d in enumerate(data)]
        microbatch = self._microbatch(data, [x.targets for x in inputs])
        if backward and self.accumulated == 0:
            self.policy.model.zero_grad_buffer()
            self.policy.optimizer.zero_grad()
        with torch.set_grad_enabled(backward):
            values = scored_logprobs(self.policy.model, microbatch, self.policy.inv_freq)
            per_datum = microbatch.sample_logprobs(values)
            elementwise = [losses.elementwise_loss(loss_fn, lp, x, config) for lp, x in zip(per_datum, inputs)]
            loss = sum(e.sum() for e in elementwise)
            if backward:
                loss.backward()
                self.accumulated += 1
        return LossResult(
            [lp.detach().float().cpu().numpy() for lp in per_datum],
            [e.detach().float().cpu().numpy() for e in elementwise],
            float(loss.detach()),
        )

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

    @property
    def steps(self) -> int:
        return self.policy.steps

    def export(self, folder: Path) -> Path:
        if self.lora is not None:
            self.policy.save_adapter(folder / ADAPTER_DIR)
        else:
            self.policy.export_hf(folder)
        return folder

    def export_external(self, folder: Path) -> Path:
        if self.lora is not None:
            return self.policy.save_adapter(folder)
        self.policy.export_hf(folder)
        return folder

    def save_state(self, folder: Path) -> Path:
        if self.lora is not None:
            self.policy.save_adapter(folder / ADAPTER_DIR)
        else:
            self.policy.export_hf(folder / WEIGHTS_DIR)
        torch.save(self.policy.optimizer.state_dict(), folder / OPTIMIZER_FILE)
        return folder


def from_state(base: Path, lora: LoraSpec | None, folder: Path, optimizer: bool) -> MegatronBackend:
    """A backend with a saved state's weights, and its Adam state when `optimizer` (else a fresh Adam)."""
    moments = folder / OPTIMIZER_FILE if optimizer else None
    if lora is not None:
        return MegatronBackend(base, lora, adapter=folder / ADAPTER_DIR, optimizer=moments)
    return MegatronBackend(folder / WEIGHTS_DIR, optimizer=moments)


def _fresh_adapter(checkpoint: Path, lora: LoraSpec, seed: int) -> Path:
    """PEFT's initialisation drawn from `seed`, as a PEFT folder the policy starts from."""
    from roost.rollout.engine.model_spec import ModelSpec
    from roost.rollout.lora import save_adapter
    from roost.trainer.megatron.lora import fresh_weights

    folder = Path(tempfile.mkdtemp(prefix="roost-tinker-adapter-")) / ADAPTER_DIR
    return save_adapter(folder, lora, fresh_weights(lora, ModelSpec.from_folder(checkpoint), seed), str(checkpoint))


def _str(path: Path | None) -> str | None:
    return None if path is None else str(path)
