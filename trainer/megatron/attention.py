"""Core attention through `torch.nn.functional.scaled_dot_product_attention`.

A drop-in for Megatron's local `DotProductAttention` (same constructor, same tensor
layout). Given a prefix tree's `TreeLayout` as the attention mask it attends chain by
chain: each chain's queries see only their ancestors' keys and their own (causally), so
the cost is that of the unique tokens, not of a dense [s, s] mask. A tensor mask is taken
as given (Megatron's convention, True = masked); no mask means causal.

`check_tree_attention` refuses a model whose core attention would ignore a tree's mask.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.enums import AttnMaskType

from ..prefix_tree import TreeLayout


class SDPAttention(DotProductAttention):
    def forward(
        self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None, packed_seq_params=None
    ):  # noqa: D102 (Megatron's signature)
        if packed_seq_params is not None or attention_bias is not None:
            raise NotImplementedError("SDPAttention takes neither packed_seq_params nor attention_bias")
        # [s, b, heads, dim] -> [b, heads, s, dim]
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        gqa = self.num_attention_heads_per_partition > self.num_query_groups_per_partition
        if isinstance(attention_mask, TreeLayout):
            context = torch.cat([self._chain(q, k, v, segment, gqa) for segment in attention_mask.segments], dim=2)
        else:
            allowed = None if attention_mask is None else ~attention_mask
            context = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=allowed,
                is_causal=attention_mask is None,
                scale=self.softmax_scale,
                enable_gqa=gqa,
            )
        # [b, heads, s, dim] -> [s, b, heads * dim]
        s, b = query.shape[0], query.shape[1]
        return context.permute(2, 0, 1, 3).reshape(s, b, self.hidden_size_per_partition)

    def _chain(self, q, k, v, segment, gqa: bool) -> torch.Tensor:
        queries = q[:, :, segment.start : segment.end]
        if segment.mask is None:
            keys, values = k[:, :, segment.start : segment.end], v[:, :, segment.start : segment.end]
        else:
            keys, values = k.index_select(2, segment.keys), v.index_select(2, segment.keys)
        return F.scaled_dot_product_attention(
            queries,
            keys,
            values,
            attn_mask=segment.mask,
            is_causal=segment.mask is None,
            scale=self.softmax_scale,
            enable_gqa=gqa,
        )


def chain_wise(model) -> bool:
    """True when every layer attends through `SDPAttention`, which takes the `TreeLayout` itself
    (and no mask as causal); other core attentions take dense masks."""
    return all(isinstance(layer.self_attention.core_attention, SDPAttention) for layer in model.decoder.layers)


class TreeMaskIgnored(ValueError):
    """The model's attention would attend causally over a prefix tree, across its branches."""


def check_tree_attention(model) -> None:
    """Raise `TreeMaskIgnored` unless every layer's core attention applies the tree's mask.

    Megatron's own `DotProductAttention` (and `SDPAttention`) take the mask they are given
    whatever the mask type; any other core attention (Transformer Engine's) applies it only
    under the `arbitrary` mask type, and under `causal` would let each token see its siblings'
    branches: logprobs silently wrong.
    """
    for number, layer in enumerate(model.decoder.layers):
        attention = layer.self_attention
        if isinstance(attention.core_attention, DotProductAttention):
            continue
        if attention.attn_mask_type != AttnMaskType.arbitrary:
            raise TreeMaskIgnored(
                f"layer {number}'s core attention ({type(attention.core_attention).__name__}) runs with mask type "
                f"{attention.attn_mask_type.name}, which ignores the prefix tree's mask and would give wrong "
                "logprobs; set trainer.attention to sdpa (or local, or te, whose spec roost builds with the "
                "arbitrary mask type), or trainer.layout to flat"
            )
