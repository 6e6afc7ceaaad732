"""A checkpoint folder as vLLM's in-place reload needs it.

vLLM 0.32 reloads weights layer by layer, and a model whose output head is tied to its input
embeddings (`tie_word_embeddings`, as the small Qwen3 models and roost's tiny models) loses
the tie on reload: the embeddings take the new weights and the head keeps the old ones, so
every logprob after the update is wrong (seen here: off by 2.5 nats on the tiny model, and
a trained policy served as if untrained). With `lm_head.weight` in the checkpoint the head is
loaded too and vLLM's logprobs equal the checkpoint's own (to 1e-6). Hugging Face checkpoints
of tied models leave that tensor out, so this module stages a folder beside the checkpoint
that links its files and adds the head as a copy of the embeddings.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

INDEX = "model.safetensors.index.json"
HEAD = "lm_head.weight"
HEAD_FILE = "lm_head.safetensors"


def _weight_files(folder: Path) -> dict[str, str]:
    """Each tensor name → the safetensors file holding it."""
    from safetensors import safe_open

    index = folder / INDEX
    if index.is_file():
        return dict(json.loads(index.read_text())["weight_map"])
    names: dict[str, str] = {}
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(file, "pt") as tensors:
            names.update({name: file.name for name in tensors.keys()})
    return names


def needs_head(folder: Path) -> bool:
    """Whether `folder` is a local checkpoint of a tied model that lacks `lm_head.weight`."""
    config = folder / "config.json"
    if not config.is_file() or not json.loads(config.read_text()).get("tie_word_embeddings"):
        return False
    return HEAD not in _weight_files(folder)


def stage_with_head(folder: Path) -> Path:
    """A new folder beside `folder`: links to its files, plus `lm_head.weight` (a copy of the
    embeddings) in its own file, listed in the index if there is one. Remove it after the reload."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    files = _weight_files(folder)
    embed = next((name for name in files if name.endswith("embed_tokens.weight")), None)
    if embed is None:
        raise ValueError(f"{folder} ties its output head to embeddings it does not contain (no *embed_tokens.weight)")
    stage = Path(tempfile.mkdtemp(prefix=f".{folder.name}-vllm-", dir=folder.parent))
    for item in folder.iterdir():
        if item.is_file() and item.name != INDEX:
            (stage / item.name).symlink_to(item.resolve())
    with safe_open(folder / files[embed], "pt") as tensors:
        save_file({HEAD: tensors.get_tensor(embed).clone()}, stage / HEAD_FILE, metadata={"format": "pt"})
    if (folder / INDEX).is_file():
        index = json.loads((folder / INDEX).read_text())
        index["weight_map"][HEAD] = HEAD_FILE
        (stage / INDEX).write_text(json.dumps(index))
    return stage


def staged_for_reload(folder: Path) -> Path | None:
    """The staged folder to reload `folder` from (remove it afterwards), or None when `folder`
    itself will do (untied, has its head, or not a folder on this machine)."""
    return stage_with_head(folder) if folder.is_dir() and needs_head(folder) else None


def remove_stage(stage: Path) -> None:
    shutil.rmtree(stage, ignore_errors=True)
