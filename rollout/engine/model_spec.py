"""The architecture facts of a Hugging Face checkpoint, read from its `config.json`.

The one reader for the embedded engine and the Megatron trainer: the trainer's logprobs
equal the engine's only while both build their models from the same shapes, norms and
RoPE, so both take them from here (RoPE's frequencies from `rope.py`). A Qwen3-VL checkpoint
is its language model (a Qwen3, read from `text_config`) with a `VisionSpec` beside it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ARCHITECTURES = {
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Qwen2ForCausalLM": "qwen2",
    "LlamaForCausalLM": "llama",
}
VISION_ARCHITECTURES = {"Qwen3VLForConditionalGeneration": "Qwen3ForCausalLM"}
"""Vision-language architectures → the architecture of their language model."""


class UnsupportedModel(ValueError):
    """The checkpoint's architecture or options are outside what the engine and trainer run."""


def read_config(folder: str | Path) -> dict[str, Any]:
    """The checkpoint folder's `config.json`."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} has no config.json; expected a Hugging Face checkpoint folder")
    return json.loads(path.read_text())


def config_vocab_size(config: dict[str, Any]) -> int:
    """A checkpoint config's vocabulary size: a vision-language model keeps it in `text_config`."""
    return int(config["vocab_size"] if "vocab_size" in config else config["text_config"]["vocab_size"])


@dataclass(frozen=True)
class MoESpec:
    """A mixture-of-experts model's sparse MLPs (Qwen3-MoE's `Qwen3MoeSparseMoeBlock`)."""

    num_experts: int
    top_k: int
    """Experts each token goes to (`num_experts_per_tok`)."""
    intermediate_size: int
    """Each expert's inner width (`moe_intermediate_size`)."""
    norm_topk_prob: bool
    """The top-k routing probabilities are renormalised to sum to 1 (Qwen3-MoE checkpoints ship true)."""
    layers: tuple[int, ...]
    """The layers whose MLP is sparse; the others (`mlp_only_layers`, `decoder_sparse_step`) are dense."""


@dataclass(frozen=True)
class VisionSpec:
    """A Qwen3-VL checkpoint's vision side: its tower's config and how images enter the language model."""

    image_token_id: int
    """The placeholder id each image's features replace, one per merged patch."""
    mrope_section: tuple[int, int, int]
    """How many rotary frequencies turn with the temporal, height and width positions (interleaved)."""
    spatial_merge_size: int
    deepstack_layers: int
    """The first this many decoder layers add one of the tower's deepstack features at the image tokens."""
    config: dict[str, Any] = field(hash=False, compare=False)
    """The checkpoint's `vision_config`, which builds the tower."""


@dataclass(frozen=True)
class ModelSpec:
    family: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    """The config's `head_dim` where it has one (Qwen3's differs from hidden_size / num_heads)."""
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    """RoPE scaling parameters, `rope_type` included; None for plain RoPE."""
    max_position_embeddings: int
    tie_word_embeddings: bool
    qk_norm: bool
    qkv_bias: bool
    eos_token_ids: tuple[int, ...]
    moe: MoESpec | None = None
    """The sparse MLPs of a mixture-of-experts model; None: dense."""
    vision: VisionSpec | None = None
    """A vision-language model's vision side; None: text only."""

    @classmethod
    def from_folder(cls, folder: str | Path) -> ModelSpec:
        generation = Path(folder) / "generation_config.json"
        extra_eos = json.loads(generation.read_text()).get("eos_token_id") if generation.is_file() else None
        return cls.from_config(read_config(folder), extra_eos)

    @classmethod
    def from_config(cls, config: dict[str, Any], extra_eos: int | list[int] | None = None) -> ModelSpec:
        architecture = (config.get("architectures") or [None])[0]
        if architecture in VISION_ARCHITECTURES:
            text = {**config["text_config"], "architectures": [VISION_ARCHITECTURES[architecture]]}
            text["tie_word_embeddings"] = config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
            return dataclasses.replace(cls.from_config(text, extra_eos), vision=_vision(config))
        family = _family(config)
        heads = config["num_attention_heads"]
        theta, scaling = _rope(config)
        return cls(
            family=family,
            vocab_size=config["vocab_size"],
            hidden_size=config["hidden_size"],
            intermediate_size=config["intermediate_size"],
            num_layers=config["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            rms_norm_eps=config.get("rms_norm_eps", 1e-6),
            rope_theta=theta,
            rope_scaling=scaling,
            max_position_embeddings=config.get("max_position_embeddings", 4096),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            qk_norm=family in QWEN3_FAMILIES,
            qkv_bias=family == "qwen2" or (family in QWEN3_FAMILIES and bool(config.get("attention_bias"))),
            eos_token_ids=_eos_ids(config.get("eos_token_id"), extra_eos),
            moe=_moe(config) if family == "qwen3_moe" else None,
        )


QWEN3_FAMILIES = ("qwen3", "qwen3_moe")


def _moe(config: dict[str, Any]) -> MoESpec:
    """Qwen3-MoE's sparse layers, as `Qwen3MoeDecoderLayer` picks them."""
    experts = config.get("num_experts") or config.get("num_local_experts") or 0  # transformers 5 writes the latter
    step = config.get("decoder_sparse_step", 1)
    dense = set(config.get("mlp_only_layers") or [])
    layers = tuple(
        i for i in range(config["num_hidden_layers"]) if experts > 0 and i not in dense and (i + 1) % step == 0
    )
    top_k = config["num_experts_per_tok"]
    if layers and not 0 < top_k <= experts:
        raise UnsupportedModel(f"num_experts_per_tok {top_k} must be between 1 and num_experts ({experts})")
    return MoESpec(experts, top_k, config["moe_intermediate_size"], bool(config.get("norm_topk_prob", False)), layers)


def _vision(config: dict[str, Any]) -> VisionSpec:
    """Qwen3-VL's vision side, as `Qwen3VLModel` wires it."""
    rope = config["text_config"].get("rope_parameters") or config["text_config"].get("rope_scaling") or {}
    vision = config["vision_config"]
    section = tuple(rope.get("mrope_section") or (24, 20, 20))  # transformers' default
    if len(section) != 3:
        raise UnsupportedModel(f"mrope_section {list(section)} must have three parts (temporal, height, width)")
    return VisionSpec(
        image_token_id=int(config["image_token_id"]),
        mrope_section=(int(section[0]), int(section[1]), int(section[2])),
        spatial_merge_size=int(vision.get("spatial_merge_size", 2)),
        deepstack_layers=len(vision.get("deepstack_visual_indexes") or []),
        config=dict(vision),
    )


def _family(config: dict[str, Any]) -> str:
    architectures = config.get("architectures")
    if architectures:
        family, what = ARCHITECTURES.get(architectures[0]), f"architecture {architectures[0]!r}"
    else:  # a config written by hand may name only its model_type
        model_type = config.get("model_type")
        family, what = (model_type if model_type in ARCHITECTURES.values() else None), f"model_type {model_type!r}"
    if family is None:
        raise UnsupportedModel(
            f"{what} is not supported; roost's engine runs {', '.join([*ARCHITECTURES, *VISION_ARCHITECTURES])} and "
            "its trainer the dense text ones of them. Serve other models with SGLang instead."
        )
    # Llama's attention_bias also puts a bias on o_proj, which neither model has.
    if family == "llama" and (config.get("attention_bias") or config.get("mlp_bias")):
        raise UnsupportedModel("Llama checkpoints with attention_bias or mlp_bias are not supported")
    if config.get("hidden_act", "silu") != "silu":
        raise UnsupportedModel(f"hidden_act {config.get('hidden_act')!r}: only silu (SwiGLU) is supported")
    return family


def _rope(config: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """RoPE's base and scaling, from `rope_parameters` (transformers 5) or the older
    `rope_theta` and `rope_scaling`."""
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    theta = float(config.get("rope_theta") or params.get("rope_theta") or 10000.0)
    partial = params.get("partial_rotary_factor") or config.get("partial_rotary_factor") or 1.0
    if partial != 1.0:
        raise UnsupportedModel(f"partial_rotary_factor {partial}: only RoPE over the whole head is supported")
    kind = params.get("rope_type") or params.get("type") or "default"
    return theta, None if kind == "default" else {**params, "rope_type": kind}


def _eos_ids(*values: int | list[int] | None) -> tuple[int, ...]:
    ids: list[int] = []
    for value in values:
        for item in value if isinstance(value, list) else [value]:
            if item is not None and item not in ids:
                ids.append(int(item))
    return tuple(ids)
