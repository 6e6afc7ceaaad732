"""The tiny model: Qwen3 architecture, a few layers, weights from a fixed seed.

It carries the real Qwen3 tokenizer and chat template, so the fidelity tests see real
template and tokenizer quirks without downloading anything. The checkpoint is an
ordinary Hugging Face folder, built once and cached.

`tiny-vllm` is the same model with attention heads of 32 dimensions: vLLM's CPU attention
supports no head size below 32, so the 16 of `tiny` kills its engine at the first request.

`tiny-moe` is the mixture-of-experts one: Qwen3-MoE architecture (`Qwen3MoeForCausalLM`), the same
attention and widths, each layer's MLP 8 experts of which every token goes to 2 (top-k
probabilities renormalised, as Qwen3-MoE checkpoints ship). Its router weights are drawn wider
than the other weights (std hidden_size^-0.5, router logits of about unit spread) so that routing
is decisive: with the initialiser's std 0.02 every token's probabilities are nearly uniform and the
top 2 of 8 are a near tie that rounding could flip.

`tiny-vl` is the vision-language one (Qwen3-VL architecture, the real processor); tiny_vlm.py
builds it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from roost.rollout.engine.tokenizer_files import qwen3_tokenizer_dir

TINY_SEED = 1234
TINY_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "vocab_size": 151936,
    "hidden_size": 64,
    "intermediate_size": 192,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
    "attention_bias": False,
    "torch_dtype": "float32",
    "bos_token_id": 151643,
    "eos_token_id": 151645,
}
# Same layers and widths; the queries and keys are twice as wide (4 heads x 32).
TINY_VLLM_CONFIG = {**TINY_CONFIG, "head_dim": 32}
TINY_MOE_CONFIG = {
    **TINY_CONFIG,
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
}
_VL_TEXT_KEYS = (
    *("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"),
    *("num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "hidden_act"),
    *("attention_bias", "bos_token_id", "eos_token_id"),
)
# The vision-language one (built by tiny_vlm.py): tiny-vllm's language model under a two-block
# vision tower; interleaved mrope over (t, h, w) sections that sum to head_dim / 2.
TINY_VL_CONFIG = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "model_type": "qwen3_vl",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "tie_word_embeddings": True,
    "text_config": {
        **{key: TINY_VLLM_CONFIG[key] for key in _VL_TEXT_KEYS},
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": TINY_VLLM_CONFIG["rope_theta"],
            "mrope_section": [6, 5, 5],
            "mrope_interleaved": True,
        },
    },
    "vision_config": {
        "depth": 2,
        "hidden_size": 32,
        "num_heads": 2,
        "intermediate_size": 64,
        "hidden_act": "gelu_pytorch_tanh",
        "in_channels": 3,
        "patch_size": 16,
        "temporal_patch_size": 2,
        "spatial_merge_size": 2,
        "out_hidden_size": 64,
        "num_position_embeddings": 256,
        "deepstack_visual_indexes": [0],
    },
}
TINY_VARIANTS = {
    "tiny": ("tiny-qwen3", TINY_CONFIG),
    "tiny-vllm": ("tiny-vllm-qwen3", TINY_VLLM_CONFIG),
    "tiny-moe": ("tiny-qwen3-moe", TINY_MOE_CONFIG),
    "tiny-vl": ("tiny-qwen3-vl", TINY_VL_CONFIG),
}
MOE_ROUTER_STD = "hidden_size^-0.5"


def roost_home() -> Path:
    """Roost's cache folder: `$ROOST_HOME`, else `~/.cache/roost`."""
    return Path(os.environ.get("ROOST_HOME", Path.home() / ".cache" / "roost"))


def _fingerprint(config: dict) -> str:
    import torch

    recipe: dict = {"config": config, "seed": TINY_SEED, "torch": torch.__version__}
    if config.get("model_type") == "qwen3_moe":  # the dense models' keys stay as they were
        recipe["router_std"] = MOE_ROUTER_STD
    if config.get("model_type") == "qwen3_vl":  # its processor files are part of the recipe too
        from roost.rollout.engine.tiny_vlm import PROCESSOR_RECIPE

        recipe["processor"] = PROCESSOR_RECIPE
    key = json.dumps(recipe)
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def tiny_model_dir(root: Path | None = None, *, variant: str = "tiny") -> Path:
    """Return the folder of the tiny model (or its `tiny-vllm`, `tiny-moe` or `tiny-vl` variant), building it on first use."""
    prefix, config = TINY_VARIANTS[variant]
    folder = (root or roost_home() / "models") / f"{prefix}-{_fingerprint(config)}"
    if not (folder / "model.safetensors").is_file():
        build_tiny_model(folder, config)
    return folder


def build_tiny_model(folder: Path, config: dict | None = None) -> Path:
    """Write the tiny model (config, safetensors weights, tokenizer) into `folder`."""
    import torch

    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".building-"))
    torch.manual_seed(TINY_SEED)
    config = config or TINY_CONFIG
    if config.get("model_type") == "qwen3_vl":
        from roost.rollout.engine.tiny_vlm import write_tiny_vlm

        write_tiny_vlm(staging, config)
    else:
        _seeded_model(config).save_pretrained(staging, safe_serialization=True)
        for item in qwen3_tokenizer_dir().iterdir():
            if item.is_file():
                shutil.copy2(item, staging / item.name)
    # Another process may have finished first: keep whichever folder landed.
    try:
        staging.rename(folder)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def _seeded_model(config: dict):
    """The model of `config`, its weights drawn from the global generator (seeded by the caller)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    if config.get("model_type") != "qwen3_moe":
        return Qwen3ForCausalLM(Qwen3Config(**config)).to(torch.float32)
    model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**config)).to(torch.float32)
    with torch.no_grad():
        for layer in model.model.layers:
            if hasattr(layer.mlp, "gate"):
                layer.mlp.gate.weight.normal_(0.0, config["hidden_size"] ** -0.5)
    return model


def resolve_model(name_or_path: str) -> Path:
    """`tiny`, `tiny-vllm`, `tiny-moe` or `tiny-vl` → that model's folder; anything else must be a local checkpoint folder."""
    if name_or_path in TINY_VARIANTS:
        return tiny_model_dir(variant=name_or_path)
    path = Path(name_or_path).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"{name_or_path!r} is neither one of {', '.join(TINY_VARIANTS)} nor a Hugging Face checkpoint folder "
            "(expected a config.json inside); download the model first, roost does not fetch weights"
        )
    return path
