"""What makes two engines serve the same model: the facts of `/get_model_info` that decide what a
token id means and what the weights are, compared before an engine takes a session.

Engines behind one gateway must agree on these, else a session moved from one to another would
continue its token tree under another vocabulary or architecture. The tokenizer and the model's
`config.json` are compared by content: by the digests roost's engine reports of its own folders
(`tokenizer_digest`, `config_digest`: an engine on another node has folders this machine cannot
read), else by reading the folders when they are readable here, else by the folder's name.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer.model")


def tokenizer_fingerprint(folder: str | Path) -> str | None:
    """A hash of the tokenizer's vocabulary files, None when the folder has none."""
    return _digest(folder, TOKENIZER_FILES)


def config_digest(folder: str | Path) -> str | None:
    """A hash of the model's `config.json`, None when the folder has none."""
    return _digest(folder, ("config.json",))


def _digest(folder: str | Path, names: tuple[str, ...]) -> str | None:
    digest = hashlib.sha256()
    found = False
    for name in names:
        path = Path(folder) / name
        if path.is_file():
            digest.update(name.encode() + path.read_bytes())
            found = True
    return digest.hexdigest()[:16] if found else None


@dataclass(frozen=True)
class ModelIdentity:
    """One engine's model, as far as a gateway in front of several must know it."""

    architecture: str
    vocab_size: str
    eos_token_ids: str
    tokenizer: str
    model_config: str

    @classmethod
    def of(cls, info: dict[str, Any]) -> ModelIdentity:
        """Read from an engine's `/get_model_info` answer (vLLM's client builds the same fields)."""
        model = str(info.get("model_path") or "")
        tokenizer = str(info.get("tokenizer_path") or model)
        return cls(
            architecture=str(info.get("architecture")),
            vocab_size=str(info.get("vocab_size")),
            eos_token_ids=str(sorted(info.get("eos_token_ids") or [])),
            tokenizer=info.get("tokenizer_digest") or tokenizer_fingerprint(tokenizer) or Path(tokenizer).name,
            model_config=info.get("config_digest") or config_digest(model) or Path(model).name,
        )

    def differences(self, other: ModelIdentity) -> list[str]:
        """What differs, one phrase a field: `vocab_size 151936 here, 400 there`."""
        return [
            f"{f.name} {getattr(self, f.name)} here, {getattr(other, f.name)} there"
            for f in fields(self)
            if getattr(self, f.name) != getattr(other, f.name)
        ]
