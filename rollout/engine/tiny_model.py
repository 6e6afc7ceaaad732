"""The tiny model: Qwen3 architecture, a few layers, weights from a fixed seed.

It carries the real Qwen3 tokenizer and chat template, so the fidelity tests see real
template and tokenizer quirks without downloading anything. The checkpoint is an
ordinary Hugging Face folder, built once and cached.

`tiny-vllm` is the same model with attention heads of 32 dimensions: vLLM's CPU attention
supports no head size below 32, so the 16 of `tiny` kills its engine at the first request.
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
TINY_VARIANTS = {"tiny": ("tiny-qwen3", TINY_CONFIG), "tiny-vllm": ("tiny-vllm-qwen3", TINY_VLLM_CONFIG)}


def roost_home() -> Path:
    """Roost's cache folder: `$ROOST_HOME`, else `~/.cache/roost`."""
    return Path(os.environ.get("ROOST_HOME", Path.home() / ".cache" / "roost"))


def _fingerprint(config: dict) -> str:
    import torch

    key = json.dumps({"config": config, "seed": TINY_SEED, "torch": torch.__version__})
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def tiny_model_dir(root: Path | None = None, *, variant: str = "tiny") -> Path:
    """Return the folder of the tiny model (or its `tiny-vllm` variant), building it on first use."""
    prefix, config = TINY_VARIANTS[variant]
    folder = (root or roost_home() / "models") / f"{prefix}-{_fingerprint(config)}"
    if not (folder / "model.safetensors").is_file():
        build_tiny_model(folder, config)
    return folder


def build_tiny_model(folder: Path, config: dict | None = None) -> Path:
    """Write the tiny model (config, safetensors weights, tokenizer) into `folder`."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".building-"))
    torch.manual_seed(TINY_SEED)
    model = Qwen3ForCausalLM(Qwen3Config(**(config or TINY_CONFIG))).to(torch.float32)
    model.save_pretrained(staging, safe_serialization=True)
    for item in qwen3_tokenizer_dir().iterdir():
        if item.is_file():
            shutil.copy2(item, staging / item.name)
    # Another process may have finished first: keep whichever folder landed.
    try:
        staging.rename(folder)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def resolve_model(name_or_path: str) -> Path:
    """`tiny` or `tiny-vllm` → that model's folder; anything else must be a local checkpoint folder."""
    if name_or_path in TINY_VARIANTS:
        return tiny_model_dir(variant=name_or_path)
    path = Path(name_or_path).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"{name_or_path!r} is neither 'tiny', 'tiny-vllm' nor a Hugging Face checkpoint folder "
            "(expected a config.json inside); download the model first, roost does not fetch weights"
        )
    return path
