"""Reading and writing Hugging Face checkpoint folders (tokenizer, safetensors; the config is
read by rollout/engine/model_spec.py).

A written folder is complete before it appears: tensors and files go to a staging folder
that is renamed into place, so an engine never loads half a checkpoint.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from roost.rollout.engine_api.model_identity import tokenizer_fingerprint  # noqa: F401 (its home moved)

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)


class CheckpointMismatch(ValueError):
    """Two checkpoints (or a checkpoint and an engine) disagree on vocabulary or tokenizer."""


def read_weights(folder: str | Path) -> dict[str, torch.Tensor]:
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder} holds no *.safetensors file")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        tensors.update(load_file(file))
    return tensors


def check_tokenizer(folder: str | Path, vocab_size: int) -> None:
    """The tokenizer's ids must fit the model's embedding rows."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        return
    data = json.loads(path.read_text())
    ids = list((data.get("model", {}).get("vocab") or {}).values())
    ids += [t["id"] for t in data.get("added_tokens", [])]
    if ids and max(ids) >= vocab_size:
        raise CheckpointMismatch(
            f"{folder}: tokenizer has token id {max(ids)} but the model's vocab_size is {vocab_size}; "
            "the tokenizer does not belong to these weights"
        )


def write_checkpoint(
    tensors: dict[str, torch.Tensor],
    source: str | Path,
    out: str | Path,
    dtype: torch.dtype | None = None,
    config: dict | None = None,
) -> Path:
    """Write `tensors` as `out/model.safetensors` with the source's config (`config`'s keys over
    it) and tokenizer."""
    source, out = Path(source), Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))
    try:
        for item in source.iterdir():
            if item.is_file() and not item.name.endswith(WEIGHT_SUFFIXES) and item.name not in WEIGHT_INDEXES:
                shutil.copy2(item, staging / item.name)
        if config:
            written = staging / "config.json"
            written.write_text(json.dumps({**json.loads(written.read_text()), **config}, indent=2))
        if dtype is not None:
            tensors = {k: v.to(dtype) for k, v in tensors.items()}
        save_file(
            {k: v.contiguous() for k, v in tensors.items()}, staging / "model.safetensors", metadata={"format": "pt"}
        )
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out
