"""Hugging Face ⇄ Megatron-core weight conversion for Qwen3, Qwen2 and Llama dense models and
Qwen3-MoE ones.

Written here rather than taken from megatron-bridge (needs Transformer Engine, CUDA and
transformers < 5) or mbridge (moves modules to CUDA and maps only Transformer Engine
names). Both directions work per tensor-parallel rank and are exact (pure reshuffles, no
arithmetic), so a round trip returns the same tensors bit for bit.

Megatron layouts: `linear_qkv` stacks, per query group, that group's query heads, then its
key head, then its value head; tensor parallelism gives each rank whole groups.
`linear_fc1` stacks [gate; up] per rank. Column-parallel weights (qkv, fc1, embedding,
output layer) split rows; row-parallel ones (proj, fc2) split columns.

A Qwen3-MoE layer's MLP is Megatron's MoE layer on the local spec: `mlp.gate` is `mlp.router`
(whole on every rank), expert e's gate/up/down projections are
`mlp.experts.local_experts.<e>.linear_fc1` ([gate; up] per rank) and `linear_fc2`, split over
tensor parallelism as a dense MLP's are (expert tensor parallelism = tensor parallelism). Under
expert parallelism rank r of E holds experts r * n / E .. (r + 1) * n / E - 1 as local experts
0 .. n / E - 1: `expert_parallel_slice` cuts a rank's from a whole state dict and
`merge_expert_parallel` puts them back.

A Qwen3-VL checkpoint's language model is under `model.language_model.` (a text model's names
under `model.`); its vision tower's `model.visual.*` tensors are the GPTModel's `vision.tower.*`,
whole on every rank, copied both ways as they are.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch

from roost.rollout.engine.model_spec import ModelSpec

# Transformer Engine's spec fuses the pre-attention and pre-MLP norms into the next linear.
_TE_NAMES = {
    "input_layernorm.weight": "self_attention.linear_qkv.layer_norm_weight",
    "pre_mlp_layernorm.weight": "mlp.linear_fc1.layer_norm_weight",
}


def _layer_names(te: bool, spec: ModelSpec) -> dict[str, str]:
    names = {
        "input_layernorm.weight": "input_layernorm.weight",
        "post_attention_layernorm.weight": "pre_mlp_layernorm.weight",
        "self_attn.o_proj.weight": "self_attention.linear_proj.weight",
        "self_attn.q_norm.weight": "self_attention.q_layernorm.weight",
        "self_attn.k_norm.weight": "self_attention.k_layernorm.weight",
    }
    if spec.moe is None:
        names["mlp.down_proj.weight"] = "mlp.linear_fc2.weight"
    else:
        names["mlp.gate.weight"] = "mlp.router.weight"
        for e in range(spec.moe.num_experts):
            names[f"mlp.experts.{e}.down_proj.weight"] = f"mlp.experts.local_experts.{e}.linear_fc2.weight"
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
        ("FFN width", spec.intermediate_size if spec.moe is None else spec.moe.intermediate_size),
    ):
        if n % tp:
            raise ValueError(f"{what} ({n}) not divisible by tensor-parallel size {tp}")


def hf_to_megatron(
    hf: dict[str, torch.Tensor], spec: ModelSpec, *, tp_rank: int = 0, tp_size: int = 1, te: bool = False
) -> dict[str, torch.Tensor]:
    """One tensor-parallel rank's Megatron state dict from a Hugging Face state dict (a Qwen3-VL
    one's vision tower whole on every rank, `_split_vision`)."""
    _check_parallel(spec, tp_size)
    vision = {}
    if spec.vision is not None:
        hf, vision = _split_vision(hf)
    rows = lambda t: t.chunk(tp_size, dim=0)[tp_rank].clone()  # noqa: E731
    cols = lambda t: t.chunk(tp_size, dim=1)[tp_rank].clone()  # noqa: E731
    out = {
        "embedding.word_embeddings.weight": rows(hf["model.embed_tokens.weight"]),
        "decoder.final_layernorm.weight": hf["model.norm.weight"].clone(),
    }
    if not spec.tie_word_embeddings:
        out["output_layer.weight"] = rows(hf["lm_head.weight"])
    names = _layer_names(te, spec)
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
        for hf_mlp, mc_mlp in _gated_mlps(spec):
            gate, up = hf[src + hf_mlp + "gate_proj.weight"], hf[src + hf_mlp + "up_proj.weight"]
            out[dst + mc_mlp + "linear_fc1.weight"] = torch.cat([rows(gate), rows(up)], dim=0)
    return {**out, **vision}


def _split_vision(hf: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """A Qwen3-VL state dict as (the language model's tensors under a text model's names: Qwen3-VL
    puts them under `model.language_model.`; the tower's `model.visual.*` as the GPTModel's
    `vision.tower.*`)."""
    text, vision = {}, {}
    for name, tensor in hf.items():
        if name.startswith("model.visual."):
            vision["vision.tower." + name.removeprefix("model.visual.")] = tensor.clone()
        else:
            text["model." + name.removeprefix("model.language_model.") if name.startswith("model.") else name] = tensor
    return text, vision


def _join_vision(text: dict[str, torch.Tensor], shard: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`_split_vision`'s inverse: Qwen3-VL's names, the tower taken from one rank's state dict."""
    out = {
        ("model.language_model." + k.removeprefix("model.") if k.startswith("model.") else k): v
        for k, v in text.items()
    }
    for name, tensor in shard.items():
        if name.startswith("vision.tower."):
            out["model.visual." + name.removeprefix("vision.tower.")] = tensor.clone()
    return out


def _gated_mlps(spec: ModelSpec) -> list[tuple[str, str]]:
    """(Hugging Face prefix, Megatron prefix) of each gated MLP of a layer: the dense MLP, or every expert."""
    if spec.moe is None:
        return [("mlp.", "mlp.")]
    return [(f"mlp.experts.{e}.", f"mlp.experts.local_experts.{e}.") for e in range(spec.moe.num_experts)]


def megatron_to_hf(
    shards: Sequence[dict[str, torch.Tensor]], spec: ModelSpec, *, te: bool = False
) -> dict[str, torch.Tensor]:
    """A Hugging Face state dict from every tensor-parallel rank's Megatron state dict (Qwen3-VL's
    names for a vision-language spec).

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
    names = _layer_names(te, spec)
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
        for hf_mlp, mc_mlp in _gated_mlps(spec):
            halves = [s[src + mc_mlp + "linear_fc1.weight"].chunk(2, dim=0) for s in shards]
            out[dst + hf_mlp + "gate_proj.weight"] = torch.cat([h[0] for h in halves], dim=0)
            out[dst + hf_mlp + "up_proj.weight"] = torch.cat([h[1] for h in halves], dim=0)
    return out if spec.vision is None else _join_vision(out, first)


_LOCAL_EXPERT = re.compile(r"\.local_experts\.(\d+)\.")


def _experts_per_rank(spec: ModelSpec, ep_size: int) -> int:
    if spec.moe is None or spec.moe.num_experts % ep_size:
        experts = 0 if spec.moe is None else spec.moe.num_experts
        raise ValueError(f"{experts} experts do not split over expert-parallel size {ep_size}")
    return spec.moe.num_experts // ep_size


def expert_parallel_slice(
    state: dict[str, torch.Tensor], spec: ModelSpec, *, ep_rank: int, ep_size: int
) -> dict[str, torch.Tensor]:
    """Expert-parallel rank `ep_rank`'s Megatron state dict from one holding every expert: the
    other tensors whole, its experts renumbered from 0."""
    per = _experts_per_rank(spec, ep_size)
    out = {}
    for name, tensor in state.items():
        match = _LOCAL_EXPERT.search(name)
        if match is None:
            out[name] = tensor
        elif int(match[1]) // per == ep_rank:
            out[_LOCAL_EXPERT.sub(f".local_experts.{int(match[1]) - ep_rank * per}.", name)] = tensor
    return out


def is_local_expert(name: str) -> bool:
    """Whether a Megatron state dict name is one of an expert-parallel rank's own experts."""
    return _LOCAL_EXPERT.search(name) is not None


def merge_expert_parallel(states: Sequence[dict[str, torch.Tensor]], spec: ModelSpec) -> dict[str, torch.Tensor]:
    """One state dict holding every expert from each expert-parallel rank's (`expert_parallel_slice`'s
    inverse); the tensors other than experts are taken from the first."""
    per = _experts_per_rank(spec, len(states))
    out = {name: tensor for name, tensor in states[0].items() if _LOCAL_EXPERT.search(name) is None}
    for rank, state in enumerate(states):
        for name, tensor in state.items():
            if match := _LOCAL_EXPERT.search(name):
                out[_LOCAL_EXPERT.sub(f".local_experts.{int(match[1]) + rank * per}.", name)] = tensor
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
