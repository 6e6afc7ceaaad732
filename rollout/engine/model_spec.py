"""The architecture facts the engine needs, read from a Hugging Face `config.json`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

SUPPORTED = {
    "Qwen3ForCausalLM": "qwen3",
    "Qwen2ForCausalLM": "qwen2",
    "LlamaForCausalLM": "llama",
}


class UnsupportedModel(ValueError):
    """The checkpoint's architecture or options are outside what the engine runs."""


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
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    qk_norm: bool
    qkv_bias: bool
    eos_token_ids: tuple[int, ...]

    @classmethod
    def from_folder(cls, folder: Path) -> ModelSpec:
        config = json.loads((folder / "config.json").read_text())
        generation = folder / "generation_config.json"
        extra_eos = json.loads(generation.read_text()).get("eos_token_id") if generation.is_file() else None
        return cls.from_config(config, extra_eos)

    @classmethod
    def from_config(cls, config: dict, extra_eos: int | list[int] | None = None) -> ModelSpec:
        arch = (config.get("architectures") or ["?"])[0]
        if arch not in SUPPORTED:
            raise UnsupportedModel(
                f"architecture {arch!r} is not supported by the embedded engine; "
                f"supported: {', '.join(SUPPORTED)}. Serve it with SGLang instead."
            )
        _check_rope(config)
        family = SUPPORTED[arch]
        heads = config["num_attention_heads"]
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
            rope_theta=_rope_theta(config),
            max_position_embeddings=config.get("max_position_embeddings", 4096),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            qk_norm=family == "qwen3",
            qkv_bias=family == "qwen2" or bool(config.get("attention_bias", False)),
            eos_token_ids=_eos_ids(config.get("eos_token_id"), extra_eos),
        )


def _rope_theta(config: dict) -> float:
    params = config.get("rope_parameters") or {}
    return float(config.get("rope_theta") or params.get("rope_theta") or 10000.0)


def _check_rope(config: dict) -> None:
    scaling = config.get("rope_scaling") or config.get("rope_parameters") or {}
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    if kind != "default":
        raise UnsupportedModel(
            f"rope scaling {kind!r} is not implemented in the embedded engine; only plain RoPE is"
        )


def _eos_ids(*values: int | list[int] | None) -> tuple[int, ...]:
    ids: list[int] = []
    for value in values:
        for item in value if isinstance(value, list) else [value]:
            if item is not None and item not in ids:
                ids.append(int(item))
    return tuple(ids)
