"""Hugging Face ⇄ Megatron-core weight conversion for Qwen3, Qwen2 and Llama dense models.

Written here rather than taken from megatron-bridge (needs Transformer Engine, CUDA and
transformers < 5) or mbridge (moves modules to CUDA and maps only Transformer Engine
names). Both directions work per tensor-parallel rank and are exact (pure reshuffles, no
arithmetic), so a round trip returns the same tensors bit for bit.

Megatron layouts: `linear_qkv` stacks, per query group, that group's query heads, then its
key head, then its value head; tensor parallelism gives each rank whole groups.
`linear_fc1` stacks [gate; up] per rank. Column-parallel weights (qkv, fc1, embedding,
output layer) split rows; row-parallel ones (proj, fc2) split columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from roost.rollout.engine.model_spec import ModelSpec

# Transformer Engine's spec fuses the pre-attention and pre-MLP norms into the next linear.
_TE_NAMES = {
    "input_layernorm.weight": "self_attention.linear_qkv.layer_norm_weight",
    "pre_mlp_layernorm.weight": "mlp.linear_fc1.layer_norm_weight",
}


def _layer_names(te: bool) -> dict[str, str]:
    names = {
        "input_layernorm.weight": "input_layernorm.weight",
        "post_attention_layernorm.weight": "pre_mlp_layernorm.weight",
        "self_attn.o_proj.weight": "self_attention.linear_proj.weight",
        "self_attn.q_norm.weight": "self_attention.q_layernorm.weight",
        "self_attn.k_norm.weight": "self_attention.k_layernorm.weight",
        "mlp.down_proj.weight": "mlp.linear_fc2.weight",
    }
    if te:
        names = {hf: _TE_NAMES.get(mc, mc) for hf, mc in names.items()}
    return names


def _qkv_to_megatron(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec: ModelSpec, rank: int, tp: int
) -> torch.Tensor:
    groups = spec.num_kv_heads
    per_group = spec.num_heads // groups
    tail = q.shape[1:]
    q = q.reshape(groups, per_group * spec.head_dim, *tail)
    k = k.reshape(groups, spec.head_dim, *tail)
    v = v.reshape(groups, spec.head_dim, *tail)
    stacked = torch.cat([q, k, v], dim=1)
    mine = stacked.chunk(tp, dim=0)[rank]
    return mine.reshape(-1, *tail).clone()


def _qkv_to_hf(shards: Sequence[torch.Tensor], spec: ModelSpec) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    groups = spec.num_kv_heads
    per_group = spec.num_heads // groups
    full = torch.cat(list(shards), dim=0)
    tail = full.shape[1:]
    full = full.reshape(groups, (per_group + 2) * spec.head_dim, *tail)
    q, k, v = full.split([per_group * spec.head_dim, spec.head_dim, spec.head_dim], dim=1)
    return q.reshape(-1, *tail).clone(), k.reshape(-1, *tail).clone(), v.reshape(-1, *tail).clone()


def _check_parallel(spec: ModelSpec, tp: int) -> None:
    for what, n in (
        ("key/value heads", spec.num_kv_heads),
        ("vocabulary", spec.vocab_size),
        ("FFN width", spec.intermediate_size),
    ):
        if n % tp:
            raise ValueError(f"{what} ({n}) not divisible by tensor-parallel size {tp}")


def hf_to_megatron(
    hf: dict[str, torch.Tensor], spec: ModelSpec, *, tp_rank: int = 0, tp_size: int = 1, te: bool = False
) -> dict[str, torch.Tensor]:
    """One tensor-parallel rank's Megatron state dict from a Hugging Face state dict."""
    _check_parallel(spec, tp_size)
    rows = lambda t: t.chunk(tp_size, dim=0)[tp_rank].clone()  # noqa: E731
    cols = lambda t: t.chunk(tp_size, dim=1)[tp_rank].clone()  # noqa: E731
    out = {
        "embedding.word_embeddings.weight": rows(hf["model.embed_tokens.weight"]),
        "decoder.final_layernorm.weight": hf["model.norm.weight"].clone(),
    }
    if not spec.tie_word_embeddings:
        out["output_layer.weight"] = rows(hf["lm_head.weight"])
    names = _layer_names(te)
    for i in range(spec.num_layers):
        src, dst = f"model.layers.{i}.", f"decoder.layers.{i}."
        for hf_name, mc_name in names.items():
            if hf_name.startswith("self_attn.") and "norm" in hf_name and not spec.qk_norm:
                continue
            tensor = hf[src + hf_name]
            if mc_name.endswith(("linear_proj.weight", "linear_fc2.weight")):
                tensor = cols(tensor)
            out[dst + mc_name] = tensor.clone()
        attn = src + "self_attn."
        out[dst + "self_attention.linear_qkv.weight"] = _qkv_to_megatron(
            hf[attn + "q_proj.weight"], hf[attn + "k_proj.weight"], hf[attn + "v_proj.weight"], spec, tp_rank, tp_size
        )
        if spec.qkv_bias:
            out[dst + "self_attention.linear_qkv.bias"] = _qkv_to_megatron(
                hf[attn + "q_proj.bias"], hf[attn + "k_proj.bias"], hf[attn + "v_proj.bias"], spec, tp_rank, tp_size
            )
        gate, up = hf[src + "mlp.gate_proj.weight"], hf[src + "mlp.up_proj.weight"]
        out[dst + "mlp.linear_fc1.weight"] = torch.cat([rows(gate), rows(up)], dim=0)
    return out


def megatron_to_hf(
    shards: Sequence[dict[str, torch.Tensor]], spec: ModelSpec, *, te: bool = False
) -> dict[str, torch.Tensor]:
    """A Hugging Face state dict from every tensor-parallel rank's Megatron state dict.

    Tied embeddings produce no `lm_head.weight`, as `save_pretrained` writes them.
    """
    _check_parallel(spec, len(shards))
    cat_rows = lambda name: torch.cat([s[name] for s in shards], dim=0)  # noqa: E731
    cat_cols = lambda name: torch.cat([s[name] for s in shards], dim=1)  # noqa: E731
    first = shards[0]
    out = {
        "model.embed_tokens.weight": cat_rows("embedding.word_embeddings.weight"),
        "model.norm.weight": first["decoder.final_layernorm.weight"].clone(),
    }
    if not spec.tie_word_embeddings:
        out["lm_head.weight"] = cat_rows("output_layer.weight")
    names = _layer_names(te)
    for i in range(spec.num_layers):
        src, dst = f"decoder.layers.{i}.", f"model.layers.{i}."
        for hf_name, mc_name in names.items():
            if hf_name.startswith("self_attn.") and "norm" in hf_name and not spec.qk_norm:
                continue
            if mc_name.endswith(("linear_proj.weight", "linear_fc2.weight")):
                out[dst + hf_name] = cat_cols(src + mc_name)
            else:
                out[dst + hf_name] = first[src + mc_name].clone()
        q, k, v = _qkv_to_hf([s[src + "self_attention.linear_qkv.weight"] for s in shards], spec)
        out.update(
            {dst + "self_attn.q_proj.weight": q, dst + "self_attn.k_proj.weight": k, dst + "self_attn.v_proj.weight": v}
        )
        if spec.qkv_bias:
            q, k, v = _qkv_to_hf([s[src + "self_attention.linear_qkv.bias"] for s in shards], spec)
            out.update(
                {dst + "self_attn.q_proj.bias": q, dst + "self_attn.k_proj.bias": k, dst + "self_attn.v_proj.bias": v}
            )
        halves = [s[src + "mlp.linear_fc1.weight"].chunk(2, dim=0) for s in shards]
        out[dst + "mlp.gate_proj.weight"] = torch.cat([h[0] for h in halves], dim=0)
        out[dst + "mlp.up_proj.weight"] = torch.cat([h[1] for h in halves], dim=0)
    return out


def load_into(model, state: dict[str, torch.Tensor]) -> None:
    """Copy a converted state dict into a (possibly DDP-wrapped) GPTModel, checking names."""
    module = getattr(model, "module", model)
    own = {k: v for k, v in module.state_dict().items() if not k.endswith("_extra_state")}
    if spec_keys := set(own) ^ set(state):
        missing, extra = sorted(set(own) - set(state)), sorted(set(state) - set(own))
        raise ValueError(
            f"converted weights do not match the model: missing {missing[:5]}, unexpected {extra[:5]} ({len(spec_keys)} names)"
        )
    with torch.no_grad():
        for name, tensor in own.items():
            if tensor.shape != state[name].shape:
                raise ValueError(f"{name}: converted shape {tuple(state[name].shape)}, model has {tuple(tensor.shape)}")
            tensor.copy_(state[name])


def model_state(model) -> dict[str, torch.Tensor]:
    """This rank's Megatron state dict (detached, without extra state)."""
    module = getattr(model, "module", model)
    return {k: v.detach().clone() for k, v in module.state_dict().items() if not k.endswith("_extra_state")}
