"""Several LoRA adapters in one forward: which rows of a batch each adapter owns, and the update.

Every row of a batch (a packed prompt token in a prefill, a request in a decode step) may use its
own adapter or none. For each adapted linear the update `x @ A.T @ B.T * scaling` is computed once
per adapter present, over that adapter's rows only (punica's segmented form of S-LoRA's gather:
the same sum, without materialising an `A` per row); rows with no adapter get nothing. A batch in
which no row has an adapter carries no groups, and the linears skip the LoRA math altogether.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(eq=False)
class LoadedAdapter:
    """An adapter the engine serves: its matrices per module, with the scaling folded into B."""

    name: str
    path: str
    rank: int
    uid: int
    """Unique per load: cached keys and values computed with it are reused only by the same load."""
    pairs: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    """Module name (`model.layers.0.self_attn.q_proj`, `lm_head`) -> (A [rank, in], scaling * B [out, rank])."""


@dataclass(frozen=True)
class LoraRows:
    """The adapters of one forward, each with the row indices it applies to."""

    groups: tuple[tuple[LoadedAdapter, torch.Tensor], ...] = ()

    @classmethod
    def of(cls, adapters: Sequence[LoadedAdapter | None], lengths: Sequence[int] | None = None) -> LoraRows:
        """Row groups for requests using `adapters` (None: the base model); request b spans
        `lengths[b]` consecutive rows (default one each)."""
        if all(adapter is None for adapter in adapters):
            return cls()
        lengths = lengths or [1] * len(adapters)
        starts = [0]
        for length in lengths:
            starts.append(starts[-1] + length)
        rows: dict[int, tuple[LoadedAdapter, list[int]]] = {}
        for b, adapter in enumerate(adapters):
            if adapter is not None:
                rows.setdefault(adapter.uid, (adapter, []))[1].extend(range(starts[b], starts[b + 1]))
        return cls(tuple((adapter, torch.tensor(ids, dtype=torch.long)) for adapter, ids in rows.values()))

    def delta(self, module: str, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """`out` plus each group's update of `module` on its rows of `x` ([..., in] -> [..., out])."""
        if not self.groups:
            return out
        flat_x, flat_out = x.reshape(-1, x.shape[-1]), out.reshape(-1, out.shape[-1])  # out is fresh: add in place
        for adapter, rows in self.groups:
            pair = adapter.pairs.get(module)
            if pair is not None:
                a, b = pair
                flat_out.index_add_(0, rows, F.linear(F.linear(flat_x.index_select(0, rows), a), b))
        return flat_out.view(out.shape)


NO_LORA = LoraRows()


class LoraLinear(nn.Linear):
    """`nn.Linear` (its state dict unchanged) that adds the adapters of the batch's rows."""

    def __init__(self, in_features: int, out_features: int, *, bias: bool, name: str):
        super().__init__(in_features, out_features, bias=bias)
        self.lora_name = name

    def forward(self, x: torch.Tensor, lora: LoraRows = NO_LORA) -> torch.Tensor:
        return lora.delta(self.lora_name, x, F.linear(x, self.weight, self.bias))
