"""LoRA adapters on the Megatron-core GPTModel, in PEFT's terms.

    hosts = attach(model, lora_spec, model_spec, tp_size=2)      # base frozen, zero adapters trainable
    load_weights(model, hosts, fresh_weights(lora_spec, model_spec), tp_rank=1, tp_size=2)   # PEFT keys
    weights = gather_weights(model, hosts, tp_size=2)             # back to PEFT keys (collective)

Each Hugging Face target (`q_proj` ... `down_proj`, `lm_head`) has its own `A` (rank × in) and
`B` (out × rank), as PEFT has; the Megatron layer that fuses several targets (`linear_qkv` holds
q, k and v per query group, `linear_fc1` holds [gate; up]) gets `scaling * B @ A @ x` of each
placed where that target's rows sit in the fused output (the layout of `convert.py`).

Tensor parallelism splits what the base weight splits: a column-parallel target keeps A whole
and B's rows this rank's (whole query groups, its FFN or vocabulary shard); a row-parallel one
(`o_proj` = linear_proj, `down_proj` = linear_fc2) keeps A's columns this rank's and B whole,
the rank-sized partial `x @ A.T` summed over the group before B, as the base layer sums its
partial outputs. Data parallelism needs nothing here: Megatron's DDP reduces every trainable
parameter's gradient.
"""

from __future__ import annotations

import math

import torch

from roost.rollout.engine.model_spec import ModelSpec
from roost.rollout.lora import UNEMBEDDING_TARGET, AdapterError, LoraSpec, peft_key

ADAPTER_MODULE = "roost_lora"
"""Attribute of a Megatron linear that holds its adapters (so their state-dict names contain it)."""
# Megatron linear -> the Hugging Face targets it fuses, in the order of its output rows.
_HOSTS = {
    "self_attention.linear_qkv": ("q_proj", "k_proj", "v_proj"),
    "self_attention.linear_proj": ("o_proj",),
    "mlp.linear_fc1": ("gate_proj", "up_proj"),
    "mlp.linear_fc2": ("down_proj",),
}
_ROW_PARALLEL = ("o_proj", "down_proj")


def is_adapter_name(name: str) -> bool:
    return f".{ADAPTER_MODULE}." in name


def target_shape(target: str, spec: ModelSpec) -> tuple[int, int]:
    """(out, in) of a target's full Hugging Face weight."""
    q, kv = spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim
    h, ffn = spec.hidden_size, spec.intermediate_size
    return {
        "q_proj": (q, h),
        "k_proj": (kv, h),
        "v_proj": (kv, h),
        "o_proj": (h, q),
        "gate_proj": (ffn, h),
        "up_proj": (ffn, h),
        "down_proj": (h, ffn),
        UNEMBEDDING_TARGET: (spec.vocab_size, h),
    }[target]


class LoraPair(torch.nn.Module):
    """One target's `lora_A` and `lora_B`, this rank's part of each."""

    def __init__(self, target: str, spec: ModelSpec, rank: int, tp_size: int, dtype: torch.dtype) -> None:
        super().__init__()
        out, inp = target_shape(target, spec)
        self.target, self.row_parallel = target, target in _ROW_PARALLEL
        if self.row_parallel:
            inp //= tp_size
        else:
            out //= tp_size
        self.lora_A = torch.nn.Parameter(torch.zeros(rank, inp, dtype=dtype))
        self.lora_B = torch.nn.Parameter(torch.zeros(out, rank, dtype=dtype))
        from megatron.core.tensor_parallel import set_tensor_model_parallel_attributes

        # the split matrix is a shard (counted once per rank in the gradient norm); the other is
        # replicated over the tensor-parallel group, its gradient the same on every rank
        split = self.lora_A if self.row_parallel else self.lora_B
        set_tensor_model_parallel_attributes(split, True, 1 if self.row_parallel else 0, 1)


class LoraHost(torch.nn.Module):
    """The adapters of one Megatron linear: each target's delta, laid out as the fused output."""

    def __init__(
        self, fused: tuple[str, ...], targets: tuple[str, ...], lora: LoraSpec, spec: ModelSpec, tp_size: int, dtype
    ) -> None:
        super().__init__()
        self.pairs = torch.nn.ModuleDict({t: LoraPair(t, spec, lora.rank, tp_size, dtype) for t in targets})
        # a fused target left out contributes zero rows (PEFT's common q_proj + v_proj adapts part of linear_qkv)
        self.fused = tuple((t, target_shape(t, spec)[0] // tp_size) for t in fused)
        self.scaling, self.dropout = lora.scaling, lora.dropout
        self.groups = spec.num_kv_heads // tp_size

    def delta(self, x: torch.Tensor) -> torch.Tensor:
        from megatron.core.tensor_parallel import (
            copy_to_tensor_model_parallel_region,
            reduce_from_tensor_model_parallel_region,
        )

        drop = self.dropout and self.training and torch.is_grad_enabled()
        parts = []
        for target, width in self.fused:
            if target not in self.pairs:
                parts.append(x.new_zeros(*x.shape[:-1], width))
                continue
            pair = self.pairs[target]
            # a mask per target, as PEFT's separate modules draw theirs
            inner = (torch.nn.functional.dropout(x, self.dropout) if drop else x) @ pair.lora_A.t()
            # row-parallel: sum the rank-sized partials, as the base layer sums its outputs;
            # column-parallel: A is whole on every rank, so its gradient (and the input's) is summed
            if pair.row_parallel:
                inner = reduce_from_tensor_model_parallel_region(inner)
            else:
                inner = copy_to_tensor_model_parallel_region(inner)
            parts.append(inner @ pair.lora_B.t() * self.scaling)
        if len(parts) == 3:  # q, k, v: per query group, its query heads, then its key and value heads
            lead = parts[0].shape[:-1]
            parts = [p.reshape(*lead, self.groups, -1) for p in parts]
            return torch.cat(parts, dim=-1).reshape(*lead, -1)
        return torch.cat(parts, dim=-1)


def _add_delta(module, args, kwargs, output):
    x = args[0] if args else kwargs["input_"]
    out, bias = output
    return out + getattr(module, ADAPTER_MODULE).delta(x), bias


def hosts_for(lora: LoraSpec, spec: ModelSpec) -> dict[str, tuple[str, ...]]:
    """Megatron module name -> the spec's targets it hosts, in its fused order."""
    mlp = sorted(set(lora.targets) & {"gate_proj", "up_proj", "down_proj"})
    if spec.moe is not None and mlp:
        raise AdapterError(
            f"LoRA targets {mlp} are MLP projections, and this {spec.family} model's MLPs are experts, which "
            "roost's adapters do not adapt (nor does its engine): keep trainer.lora.targets to attention "
            "(q_proj, k_proj, v_proj, o_proj) and lm_head"
        )
    hosts = {}
    for i in range(spec.num_layers):
        for name, fused in _HOSTS.items():
            if mine := tuple(t for t in fused if t in lora.targets):
                hosts[f"decoder.layers.{i}.{name}"] = mine
    if UNEMBEDDING_TARGET in lora.targets:
        hosts["output_layer"] = (UNEMBEDDING_TARGET,)
    return hosts


def attach(model, lora: LoraSpec, spec: ModelSpec, *, tp_size: int = 1) -> dict[str, tuple[str, ...]]:
    """Freeze the model's weights and add zero adapters to its targets; returns `hosts_for`."""
    module = getattr(model, "module", model)
    if getattr(module, "roost_attention", None) == "te":
        raise AdapterError("LoRA runs on the local layer specs (trainer.attention sdpa or local), not te")
    module.requires_grad_(False)
    dtype = next(module.parameters()).dtype
    hosts = hosts_for(lora, spec)
    for name, targets in hosts.items():
        host = module.get_submodule(name)
        fused = _HOSTS.get(name.split(".", 3)[-1], targets)
        setattr(host, ADAPTER_MODULE, LoraHost(fused, targets, lora, spec, tp_size, dtype))
        host.register_forward_hook(_add_delta, with_kwargs=True)
    return hosts


def _pairs(model, hosts: dict[str, tuple[str, ...]]):
    """(layer, target, pair) of every adapter."""
    module = getattr(model, "module", model)
    for name, targets in hosts.items():
        layer = int(name.split(".")[2]) if name.startswith("decoder.layers.") else None
        host = getattr(module.get_submodule(name), ADAPTER_MODULE)
        for target in targets:
            yield layer, target, host.pairs[target]


def fresh_weights(lora: LoraSpec, spec: ModelSpec, seed: int = 0) -> dict[str, torch.Tensor]:
    """PEFT's initialisation in full shapes, the same on every rank: A kaiming-uniform (a = √5),
    B zero, so a fresh adapter changes nothing."""
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name, targets in hosts_for(lora, spec).items():
        layer = int(name.split(".")[2]) if name.startswith("decoder.layers.") else None
        for target in targets:
            rows, cols = target_shape(target, spec)
            a = torch.empty(lora.rank, cols)
            torch.nn.init.kaiming_uniform_(a, a=math.sqrt(5), generator=generator)
            out[peft_key(layer, target, "lora_A")] = a
            out[peft_key(layer, target, "lora_B")] = torch.zeros(rows, lora.rank)
    return out


def load_weights(
    model, hosts: dict[str, tuple[str, ...]], weights: dict[str, torch.Tensor], *, tp_rank: int = 0, tp_size: int = 1
) -> None:
    """Copy PEFT-keyed full matrices into this rank's adapters; an error names a missing key or a
    wrong shape."""
    with torch.no_grad():
        for layer, target, pair in _pairs(model, hosts):
            for half, param in (("lora_A", pair.lora_A), ("lora_B", pair.lora_B)):
                key = peft_key(layer, target, half)
                if key not in weights:
                    raise AdapterError(f"adapter has no {key}: it does not adapt this model's {target}")
                full = weights[key]
                split = (half == "lora_A") == pair.row_parallel
                mine = full.chunk(tp_size, dim=1 if pair.row_parallel else 0)[tp_rank] if split else full
                if mine.shape != param.shape:
                    expected = list(param.shape)
                    if split:
                        expected[1 if pair.row_parallel else 0] *= tp_size
                    raise AdapterError(
                        f"{key}: shape {tuple(full.shape)}, but this model's {target} with rank "
                        f"{pair.lora_A.shape[0]} needs {tuple(expected)}"
                    )
                param.copy_(mine)


def gather_weights(
    model, hosts: dict[str, tuple[str, ...]], *, tp_size: int = 1, grads: bool = False
) -> dict[str, torch.Tensor]:
    """Every adapter as PEFT-keyed full matrices on CPU (collective over tensor parallel); `grads`:
    their gradients instead, as Megatron's DDP reduced them (`main_grad`)."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    out = {}
    for layer, target, pair in _pairs(model, hosts):
        for half, param in (("lora_A", pair.lora_A), ("lora_B", pair.lora_B)):
            tensor = (param.main_grad if grads else param).detach()
            if tp_size > 1 and (half == "lora_A") == pair.row_parallel:
                pieces = [torch.empty_like(tensor) for _ in range(tp_size)]
                dist.all_gather(pieces, tensor.contiguous(), group=parallel_state.get_tensor_model_parallel_group())
                tensor = torch.cat(pieces, dim=1 if pair.row_parallel else 0)
            out[peft_key(layer, target, half)] = tensor.cpu().clone()
    return out


def merge(hf: dict[str, torch.Tensor], weights: dict[str, torch.Tensor], lora: LoraSpec) -> dict[str, torch.Tensor]:
    """A Hugging Face state dict with `W + scaling * B @ A` folded in. An adapted, tied unembedding
    becomes its own `lm_head.weight` (the checkpoint must then say `tie_word_embeddings: false`)."""
    merged = dict(hf)
    for key, a in weights.items():
        if ".lora_A." not in key:
            continue
        b = weights[key.replace(".lora_A.", ".lora_B.")]
        name = key.removeprefix("base_model.model.").replace(".lora_A.weight", ".weight")
        base = merged.get(name, hf["model.embed_tokens.weight"] if name == "lm_head.weight" else None)
        merged[name] = (base.float() + lora.scaling * (b.float() @ a.float())).to(base.dtype)
    return merged
