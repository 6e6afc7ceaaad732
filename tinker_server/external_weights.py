"""External weights (`save_weights_external`) and the signed URLs their files download from.

An export is a folder of the weights as others load them (a LoRA model's adapter in PEFT's layout,
else a Hugging Face checkpoint) at `tinker://<run>/external_weights/<name>`. The SDK downloads it
file by file from URLs it fetches with no key (`tinker checkpoint download` uses urllib), so each
URL carries its own proof instead: an HMAC, under a secret the server draws at start, of the
checkpoint path, the file and the time the URL expires.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

FILES_PREFIX = "/api/v1/external_files/"
"""The route files download from; open to requests without a key, which carry a signature instead."""
URL_LIFETIME_S = 3600


@dataclass(frozen=True)
class Signer:
    secret: bytes

    def signature(self, path: str, relative: str, expires: int) -> str:
        message = f"{path}\n{relative}\n{expires}".encode()
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()

    def urls(self, base_url: str, path: str, folder: Path, now: float | None = None) -> tuple[dict[str, str], int]:
        """A signed URL for each file under `folder`, keyed by its path in it; and when they expire."""
        expires = int(now if now is not None else time.time()) + URL_LIFETIME_S
        urls = {}
        for relative in files_of(folder):
            signature = self.signature(path, relative, expires)
            tail = quote(f"{path.removeprefix('tinker://')}/{relative}")
            urls[relative] = f"{base_url.rstrip('/')}{FILES_PREFIX}{signature}/{expires}/{tail}"
        return urls, expires

    def check(self, signature: str, expires: int, path: str, relative: str) -> str | None:
        """Why the URL is refused (None: it is good)."""
        if not hmac.compare_digest(signature, self.signature(path, relative, expires)):
            return "the URL's signature does not match its file; ask get_external_weights_urls for fresh URLs"
        if expires < time.time():
            return "the URL has expired; ask get_external_weights_urls for fresh URLs"
        return None


def files_of(folder: Path) -> list[str]:
    return sorted(str(f.relative_to(folder)) for f in folder.rglob("*") if f.is_file())


def split_file_path(tail: str) -> tuple[str, str]:
    """`<run>/external_weights/<name>/<file>` → (its checkpoint's tinker path, the file in it)."""
    run, segment, name, *rest = tail.split("/")
    if segment != "external_weights" or not rest:
        raise ValueError(f"{tail!r} is not <run>/external_weights/<name>/<file>")
    return f"tinker://{run}/{segment}/{name}", "/".join(rest)
