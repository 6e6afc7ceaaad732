"""Qwen3-MoE's sparse MLP for the embedded engine: a router and experts, top-k per token.

The router's softmax (in float32) picks each token's `top_k` experts; their probabilities,
renormalised to sum to 1 where the checkpoint says `norm_topk_prob`, weigh the experts' outputs
(transformers' `Qwen3MoeSparseMoeBlock`). The experts run grouped: the (token, choice) pairs are
sorted by expert and each expert that has tokens runs one matmul over all of them, in prefill
and decode alike. A dense gather of every token's expert weights would be one batched matmul
but holds tokens x top_k copies of the weights (hundreds of MB for a long prefill even of a small
model); grouping holds none and, on CPU, costs one loop step per expert hit. Module names are the
checkpoint's (`mlp.gate`, `mlp.experts.<e>.gate_proj`), so its state dict loads as it is.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from roost.rollout.engine.model_spec import ModelSpec


class Expert(nn.Module):
    def __init__(self, hidden: int, inner: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoE(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        moe = spec.moe
        if moe is None:
            raise ValueError("SparseMoE needs a mixture-of-experts spec")
        self.top_k, self.norm_topk_prob = moe.top_k, moe.norm_topk_prob
        self.gate = nn.Linear(spec.hidden_size, moe.num_experts, bias=False)
        self.experts = nn.ModuleList(Expert(spec.hidden_size, moe.intermediate_size) for _ in range(moe.num_experts))

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [N, hidden] -> each row's top-k expert weights (x's dtype) and ids, [N, top_k], most
        probable first."""
        probs = torch.softmax(self.gate(x), dim=-1, dtype=torch.float32)
        weights, ids = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(x.dtype), ids

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [..., hidden] -> the MLP's output (x's shape) and each row's expert ids, [rows, top_k]."""
        flat = x.reshape(-1, x.shape[-1])
        weights, ids = self.route(flat)
        choices = ids.flatten()
        order = torch.argsort(choices, stable=True)  # the (token, choice) pairs, expert by expert
        counts = torch.bincount(choices, minlength=len(self.experts)).tolist()
        out = torch.zeros_like(flat)
        start = 0
        for expert, count in zip(self.experts, counts):
            if count:
                pairs = order[start : start + count]
                tokens = pairs // self.top_k
                out.index_add_(0, tokens, expert(flat[tokens]) * weights.flatten()[pairs, None])
                start += count
        return out.reshape(x.shape), ids
