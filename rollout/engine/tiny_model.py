"""The tiny model: Qwen3 architecture, a few layers, weights from a fixed seed.

It carries the real Qwen3 tokenizer and chat template, so the fidelity tests see real
template and tokenizer quirks without downloading anything. The checkpoint is an
ordinary Hugging Face folder, built once and cached.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from .tokenizer_files import qwen3_tokenizer_dir

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


def roost_home() -> Path:
    """Roost's cache folder: `$ROOST_HOME`, else `~/.cache/roost`."""
    return Path(os.environ.get("ROOST_HOME", Path.home() / ".cache" / "roost"))


def _fingerprint() -> str:
    import torch

    key = json.dumps({"config": TINY_CONFIG, "seed": TINY_SEED, "torch": torch.__version__})
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def tiny_model_dir(root: Path | None = None) -> Path:
    """Return the tiny model's checkpoint folder, building it on first use."""
    folder = (root or roost_home() / "models") / f"tiny-qwen3-{_fingerprint()}"
    if not (folder / "model.safetensors").is_file():
        build_tiny_model(folder)
    return folder


def build_tiny_model(folder: Path) -> Path:
    """Write the tiny model (config, safetensors weights, tokenizer) into `folder`."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".building-"))
    torch.manual_seed(TINY_SEED)
    model = Qwen3ForCausalLM(Qwen3Config(**TINY_CONFIG)).to(torch.float32)
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
    """`tiny` → the tiny model's folder; anything else must be a local checkpoint folder."""
    if name_or_path == "tiny":
        return tiny_model_dir()
    path = Path(name_or_path).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"{name_or_path!r} is neither 'tiny' nor a Hugging Face checkpoint folder "
            "(expected a config.json inside); download the model first, roost does not fetch weights"
        )
    return path
