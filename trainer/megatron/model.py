"""Megatron-core GPTModel for Qwen3, Qwen2 and Llama dense checkpoints and Qwen3-MoE ones, and
its forward on a packed microbatch down to the logprobs of the scored tokens.

The forward runs GPTModel's own embedding, decoder and output layer, but drives RoPE from
the caller's position ids (GPTModel's forward ignores them for RoPE, and tree packing
needs depth positions) and applies the vocabulary projection only to the rows whose
next-token logprob is needed. The architecture is the engine's reading of the checkpoint
(`ModelSpec`, RoPE from `rollout/engine/rope.py`), so the two compute the same logprobs.

A Qwen3-MoE checkpoint runs on Megatron's own MoE layer (`MoELayer`: `TopKRouter`, the experts as
a `SequentialMLP`), routed as Qwen3-MoE routes: softmax over the router's logits, top-k, and with
`norm_topk_prob` the top-k probabilities renormalised, which is Megatron's softmax over the top-k
logits (`moe_router_pre_softmax` off); without it, the top-k of the full softmax (pre-softmax on).
No load-balancing loss unless asked (`moe_aux_loss_coeff`). Every layer must be sparse (a
checkpoint with `mlp_only_layers` is refused). Routing replay (R3) hooks into the routers:
`routing_replay.py`. Under tensor parallelism an MoE model runs sequence parallelism (Megatron's
MoE layer trains so only): `sequence_parallel.py`.

A Qwen3-VL checkpoint's language model is a GPTModel as above, with the checkpoint's frozen vision
tower beside it: its features, deepstack features and interleaved mrope are `vision.py`'s.
"""

from __future__ import annotations

from typing import Any

import torch

from roost.rollout.engine.model_spec import ModelSpec, UnsupportedModel
from roost.rollout.vision.mrope import mrope_freqs

from ..allowed_tokens import shard_mask
from ..prefix_tree import Microbatch


def rotary_embedding(inv_freq: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
    """Rotary angles for each token from its position id: [s, b, 1, head_dim]."""
    freqs = position_ids[..., None].float() * inv_freq.float()
    return torch.cat((freqs, freqs), dim=-1).transpose(0, 1).unsqueeze(2)


def mrope_rotary_embedding(
    inv_freq: torch.Tensor, position_ids: torch.Tensor, mrope_section: tuple[int, int, int]
) -> torch.Tensor:
    """Rotary angles for interleaved multimodal RoPE (Qwen3-VL) from 3-D position ids
    [3, b, s] (temporal, height, width): [s, b, 1, head_dim], interleaved as the engine does
    (`roost.rollout.vision.mrope`)."""
    freqs = mrope_freqs(inv_freq, position_ids, mrope_section)  # [b, s, head_dim / 2]
    return torch.cat((freqs, freqs), dim=-1).transpose(0, 1).unsqueeze(2)


def moe_fields(spec: ModelSpec, aux_loss_coeff: float = 0.0) -> dict[str, Any]:
    """TransformerConfig's MoE fields for a Qwen3-MoE spec (none for a dense one): Megatron's
    MoE layer in every layer, routed as `Qwen3MoeSparseMoeBlock` routes; `aux_loss_coeff` > 0 adds
    the load-balancing loss (off by default: RL trains the policy the engine sampled)."""
    moe = spec.moe
    if moe is None:
        return {}
    if len(moe.layers) != spec.num_layers:
        dense = sorted(set(range(spec.num_layers)) - set(moe.layers))
        raise UnsupportedModel(
            f"layers {dense} of this {spec.family} checkpoint have dense MLPs (mlp_only_layers or "
            "decoder_sparse_step): roost's Megatron trainer builds MoE models whose every layer is sparse"
        )
    return dict(
        num_moe_experts=moe.num_experts,
        moe_router_topk=moe.top_k,
        moe_ffn_hidden_size=moe.intermediate_size,
        moe_router_pre_softmax=not moe.norm_topk_prob,
        moe_router_score_function="softmax",
        moe_router_load_balancing_type="aux_loss" if aux_loss_coeff > 0 else "none",
        moe_aux_loss_coeff=aux_loss_coeff,
        moe_token_dispatcher_type="alltoall",
        moe_grouped_gemm=False,
    )


def transformer_config(
    spec: ModelSpec,
    *,
    tp: int = 1,
    dtype: torch.dtype = torch.float32,
    moe_aux_loss_coeff: float = 0.0,
    **overrides: Any,
):
    """Megatron's TransformerConfig for `spec` (dense, Qwen3-MoE, or Qwen3-VL's language model),
    tensor-parallel over `tp` ranks."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    if spec.moe is not None and spec.vision is not None and tp > 1:
        raise UnsupportedModel(
            f"tensor-parallel size {tp} on a vision-language mixture-of-experts model: roost runs sequence "
            "parallelism (which Megatron's MoE layer needs under tensor parallelism) on text models only"
        )
    on_gpu = torch.cuda.is_available()
    fields: dict[str, Any] = dict(
        num_layers=spec.num_layers,
        hidden_size=spec.hidden_size,
        ffn_hidden_size=spec.intermediate_size,
        num_attention_heads=spec.num_heads,
        num_query_groups=spec.num_kv_heads,
        kv_channels=spec.head_dim,
        normalization="RMSNorm",
        layernorm_epsilon=spec.rms_norm_eps,
        gated_linear_unit=True,
        activation_func=torch.nn.functional.silu,
        add_bias_linear=False,
        add_qkv_bias=spec.qkv_bias,
        qk_layernorm=spec.qk_norm,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        params_dtype=dtype,
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        tensor_model_parallel_size=tp,
        use_cpu_initialization=not on_gpu,
        perform_initialization=False,
        bias_activation_fusion=False,
        masked_softmax_fusion=False,
        persist_layer_norm=False,
        bias_dropout_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        # Megatron's MoE layer trains under tensor parallelism only with the sequence split too
        sequence_parallel=spec.moe is not None and tp > 1,
        **moe_fields(spec, moe_aux_loss_coeff),
    )
    fields.update(overrides)
    return TransformerConfig(**fields)


def transformer_engine_available() -> bool:
    try:
        import transformer_engine  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()


ATTENTIONS = ("sdpa", "local", "te")


def layer_spec(spec: ModelSpec, attention: str = "sdpa", sequence_parallel: bool = False):
    """The layer spec for `attention`, each honouring a tree's mask (with `sequence_parallel`, its
    norms are `SequenceParallelRMSNorm`):

    `sdpa` (the default): Megatron's local spec with `SDPAttention`, which attends chain by chain;
    `local`: the local spec with Megatron's `DotProductAttention` (materialises the [n, n] scores);
    `te`: Transformer Engine's spec (needs TE and CUDA) with the `arbitrary` mask type, the one
    under which TE applies the dense tree mask (its causal type ignores any mask; TE runs an
    arbitrary mask unfused, materialising the scores too).
    """
    from megatron.core.models.gpt import gpt_layer_specs
    from megatron.core.transformer.enums import AttnMaskType

    if attention == "te":
        if spec.moe is not None:
            raise UnsupportedModel(
                "roost builds mixture-of-experts models on the local layer spec only: set trainer.attention to sdpa or local"
            )
        if not transformer_engine_available():
            raise ValueError(
                "trainer.attention te needs Transformer Engine and a CUDA device; use sdpa (the default) or local"
            )
        te = gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec(qk_layernorm=spec.qk_norm)
        te.submodules.self_attention.params = {
            **te.submodules.self_attention.params,
            "attn_mask_type": AttnMaskType.arbitrary,
        }
        return te
    experts = spec.moe.num_experts if spec.moe else None
    local = gpt_layer_specs.get_gpt_layer_local_spec(
        num_experts=experts, moe_grouped_gemm=False, qk_layernorm=spec.qk_norm, normalization="RMSNorm"
    )
    if attention == "sdpa":
        from .attention import SDPAttention

        local.submodules.self_attention.submodules.core_attention = SDPAttention
    elif attention != "local":
        raise ValueError(f"trainer.attention must be one of {', '.join(ATTENTIONS)}, not {attention!r}")
    if sequence_parallel:  # Megatron's torch norm refuses sequence parallelism
        from .sequence_parallel import HeadRMSNorm, SequenceParallelRMSNorm

        local.submodules.input_layernorm = SequenceParallelRMSNorm
        local.submodules.pre_mlp_layernorm = SequenceParallelRMSNorm
        if spec.qk_norm:
            attention_modules = local.submodules.self_attention.submodules
            attention_modules.q_layernorm = attention_modules.k_layernorm = HeadRMSNorm
    return local


def build_gpt_model(spec: ModelSpec, config, attention: str | None = None):
    """A GPTModel for `spec` (weights uninitialised: load them with `convert`); `attention`
    None is `sdpa`, the one that never materialises an [n, n] matrix. A Qwen3-VL spec's model
    carries its frozen vision tower as `model.vision` (`vision.py`)."""
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules

    attention = attention or "sdpa"
    if spec.vocab_size % config.tensor_model_parallel_size:
        raise UnsupportedModel(
            f"vocab size {spec.vocab_size} is not divisible by tensor-parallel size {config.tensor_model_parallel_size}"
        )
    layers = layer_spec(spec, attention, config.sequence_parallel)
    if config.sequence_parallel:  # the final norm too (a block spec names it; a layer spec takes Megatron's)
        from .sequence_parallel import SequenceParallelRMSNorm

        layers = TransformerBlockSubmodules(layer_specs=[layers] * spec.num_layers, layer_norm=SequenceParallelRMSNorm)
    model = GPTModel(
        config,
        layers,
        vocab_size=spec.vocab_size,
        max_sequence_length=spec.max_position_embeddings,
        position_embedding_type="rope",
        rotary_base=int(spec.rope_theta),
        share_embeddings_and_output_weights=spec.tie_word_embeddings,
        # scored_hidden scatters the sequence itself, after any image rows are placed
        scatter_embedding_sequence_parallel=False,
    )
    if config.sequence_parallel:
        from .sequence_parallel import whole_row_output_layer

        whole_row_output_layer(model)
    model.roost_attention = attention
    if spec.vision is not None:
        from .vision import attach_vision

        attach_vision(model, spec.vision)
    return model


def scored_logprobs(
    model, microbatch: Microbatch, inv_freq: torch.Tensor, rows: torch.Tensor | None = None
) -> torch.Tensor:
    """Logprob of each scored token of the microbatch, [num_scored], differentiable: the model's
    own distribution, whatever grammar held the sampling. `rows`: the `scored_hidden` of this
    forward, when the caller has it (the value head reads the same rows).

    Works under tensor parallelism: the output layer yields this rank's vocabulary shard
    and the vocab-parallel cross entropy reduces over the tensor-parallel group.
    """
    logits = _scored_logits(model, microbatch, inv_freq, rows)
    return _logprobs(logits, microbatch.score_targets.to(logits.device))


def masked_logprobs(
    model, microbatch: Microbatch, inv_freq: torch.Tensor, rows: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprob of each scored token over the tokens its grammar allowed, log of the mass the
    model gave those tokens), each [num_scored] and differentiable; the first is the model's own
    logprob minus the second. Entries of free replies (and microbatches without a grammar) allow
    every token: their mass is 1, their logprob the model's own.

    Under tensor parallelism each rank masks its vocabulary shard before the vocab-parallel
    cross entropy. `rows` as in `scored_logprobs`.
    """
    logits = _scored_logits(model, microbatch, inv_freq, rows)
    targets = microbatch.score_targets.to(logits.device)
    if microbatch.score_allowed is None or logits.shape[0] == 0:
        full = _logprobs(logits, targets)
        return full, torch.zeros_like(full)
    from megatron.core import parallel_state

    width = logits.shape[-1]
    start = parallel_state.get_tensor_model_parallel_rank() * width
    allowed = shard_mask(microbatch.score_allowed.to(logits.device), start, width)
    masked = _logprobs(logits.masked_fill(~allowed[:, None, :], float("-inf")), targets)
    full = _logprobs(logits, targets)  # last: the cross entropy overwrites its (float32) logits in place
    return masked, full - masked


def _logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    from megatron.core import tensor_parallel

    if logits.shape[0] == 0:
        return logits.sum() * 0.0 + torch.zeros(0, device=logits.device)
    return -tensor_parallel.vocab_parallel_cross_entropy(logits.float(), targets[:, None])[:, 0]


def _scored_logits(
    model, microbatch: Microbatch, inv_freq: torch.Tensor, rows: torch.Tensor | None = None
) -> torch.Tensor:
    """The output layer's logits at each scored entry's row, [num_scored, 1, vocab / tp]."""
    model = getattr(model, "module", model)  # unwrap Megatron DDP
    rows = scored_hidden(model, microbatch, inv_freq) if rows is None else rows
    if rows.shape[0] == 0:  # keep the graph connected: every rank runs backward
        return rows.sum() * 0.0 + torch.zeros(0, 1, 1, device=rows.device)
    weight = model.shared_embedding_or_output_weight() if model.share_embeddings_and_output_weights else None
    logits, _ = model.output_layer(rows[:, None, :], weight=weight)  # [m, 1, vocab / tp]
    return logits


def scored_hidden(model, microbatch: Microbatch, inv_freq: torch.Tensor) -> torch.Tensor:
    """The decoder's output at each scored entry's row, [num_scored, hidden]: the row whose
    next-token distribution scores the entry, after the final layernorm. Under tensor parallelism
    the hidden state there is whole on every rank (the layers' row-parallel outputs are reduced),
    so the output layer and the value head read the same rows. A microbatch that carries routed
    experts is routed by them (R3, `routing_replay.py`); one that carries images (Qwen3-VL) has
    their features at its placeholder rows and deepstack features after the first layers, and
    turns by its 3-D positions (`vision.py`)."""
    from . import sequence_parallel as sp
    from .attention import chain_wise, check_tree_attention
    from .routing_replay import replaying
    from .vision import deepstack, microbatch_features, scatter_rows

    model = getattr(model, "module", model)  # unwrap Megatron DDP
    split = model.config.sequence_parallel
    microbatch = microbatch.to(next(model.parameters()).device)
    if split:
        microbatch = sp.pad_rows(microbatch, model.config.tensor_model_parallel_size)
    input_ids, position_ids = microbatch.input_ids, microbatch.position_ids
    hidden = model.embedding(input_ids=input_ids, position_ids=None)  # [s, b, h]; RoPE is applied below
    placed = microbatch_features(model, microbatch)
    if placed is not None:
        hidden = scatter_rows(hidden, placed.rows, placed.embeds, add=False)
    sparse = chain_wise(model)
    if microbatch.tree is not None:
        check_tree_attention(model)
        mask = microbatch.tree if sparse else microbatch.tree.dense_mask()
    elif sparse:
        mask = None  # causal rows
    else:
        n = input_ids.shape[1]
        mask = (
            torch.ones(n, n, dtype=torch.bool, device=input_ids.device)
            .triu(1)[None, None]
            .expand(input_ids.shape[0], 1, n, n)
        )
    sequence = sp.rank_slice(hidden.shape[0]) if split else None
    with (
        replaying(model, microbatch.routed_experts, input_ids.shape[0], sequence),
        deepstack(model, placed),
    ):
        hidden = model.decoder(
            hidden_states=sp.scatter(hidden) if split else hidden,
            attention_mask=mask,
            rotary_pos_emb=_rotary(model, inv_freq, position_ids),
        )
    if split:
        hidden = sp.gather(hidden)
    return hidden.transpose(0, 1).reshape(-1, hidden.shape[-1])[microbatch.score_rows]


def _rotary(model, inv_freq: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
    """The decoder's rotary angles: interleaved mrope for 3-D position ids, plain RoPE otherwise."""
    inv_freq = inv_freq.to(position_ids.device)
    if position_ids.dim() == 2:
        return rotary_embedding(inv_freq, position_ids)
    section = getattr(model, "roost_mrope_section", None)
    if section is None:
        raise ValueError(
            "the microbatch has 3-D (multimodal) position ids but the model is not a vision-language one: "
            "pack text samples without mrope_positions"
        )
    return mrope_rotary_embedding(inv_freq, position_ids, section)
