"""RoPE's inverse frequencies for a `ModelSpec`: the engine and the trainer rotate with these."""

from __future__ import annotations

import torch

from roost.rollout.engine.model_spec import ModelSpec, UnsupportedModel


def inverse_frequencies(spec: ModelSpec) -> torch.Tensor:
    """RoPE inverse frequencies exactly as Hugging Face computes them (scaling included)."""
    if spec.rope_scaling is None:
        dim = spec.head_dim
        return 1.0 / (spec.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rope_type = spec.rope_scaling["rope_type"]
    if rope_type not in ROPE_INIT_FUNCTIONS:
        raise UnsupportedModel(f"rope_type {rope_type!r} is unknown; known: {', '.join(ROPE_INIT_FUNCTIONS)}")
    config = LlamaConfig(
        hidden_size=spec.hidden_size,
        num_attention_heads=spec.num_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        rope_parameters={**spec.rope_scaling, "rope_theta": spec.rope_theta},
    )
    inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, None)
    if abs(scaling - 1.0) > 1e-12:
        raise UnsupportedModel(f"rope_type {rope_type!r} scales attention by {scaling}; not supported")
    return inv_freq
