"""The model's tokenizer, encoding text one segment at a time between added tokens.

Hugging Face tokenizers split text at added tokens (`<|im_start|>`, `<tool_call>`, ...)
before anything else, so the ids of a rendered chat are the concatenation of the ids of its
segments. Caching segments makes re-tokenizing a long conversation cost only its new
segments. `segments_are_exact` checks the property for a tokenizer (added tokens that strip
neighbouring whitespace or normalize would break it); where it fails, whole texts are
encoded instead.
"""

from __future__ import annotations

import re
from array import array
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

PROBE = (
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n  Hello, wörld! 123 "
    "  tabs\t<think>\nhmm\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"
    "<|im_end|>\n<|im_start|>assistant\n"
)


class ChatTokenizer:
    """Encode/decode with a segment cache; `eos_text`/`eos_id` end an assistant turn."""

    def __init__(self, backend: Tokenizer, *, eos_token: str, cache_entries: int = 100_000):
        self.backend = backend
        self.eos_text = eos_token
        eos_id = backend.token_to_id(eos_token)
        if eos_id is None:
            raise ValueError(f"end-of-turn token {eos_token!r} is not in the tokenizer's vocabulary")
        self.eos_id = eos_id
        added = backend.get_added_tokens_decoder()
        self.added_ids = {tok.content: idx for idx, tok in added.items()}
        self.special_ids = frozenset(idx for idx, tok in added.items() if tok.special)
        contents = sorted(self.added_ids, key=len, reverse=True)
        self._splitter = re.compile("(" + "|".join(re.escape(c) for c in contents) + ")") if contents else None
        self._cache: dict[str, array] = {}
        self._cache_entries = cache_entries
        self.segmented = self._splitter is not None and self.segments_are_exact(PROBE)

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs: Any) -> ChatTokenizer:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(str(path))
        return cls(hf.backend_tokenizer, eos_token=kwargs.pop("eos_token", None) or hf.eos_token, **kwargs)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode_whole(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def encode(self, text: str) -> list[int]:
        return self.encode_array(text).tolist()

    def encode_array(self, text: str) -> array:
        """Ids as `array('i')`: cached segments are copied in whole, no per-token Python work."""
        if not self.segmented:
            return array("i", self.encode_whole(text))
        ids = array("i")
        added = self.added_ids
        cache = self._cache
        for piece in self._splitter.split(text):
            if not piece:
                continue
            token = added.get(piece)
            if token is not None:
                ids.append(token)
                continue
            cached = cache.get(piece)
            if cached is None:
                cached = array("i", self.backend.encode(piece, add_special_tokens=False).ids)
                if len(cache) >= self._cache_entries:
                    # Evict the oldest tenth; dicts keep insertion order.
                    for key in list(cache)[: self._cache_entries // 10]:
                        del cache[key]
                cache[piece] = cached
            ids.extend(cached)
        return ids

    def decode(self, ids: Any, *, skip_special_tokens: bool = False) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def segments_are_exact(self, text: str) -> bool:
        if self._splitter is None:
            return True
        pieces = [p for p in self._splitter.split(text) if p]
        ids: list[int] = []
        for piece in pieces:
            token = self.added_ids.get(piece)
            ids.extend([token] if token is not None else self.encode_whole(piece))
        return ids == self.encode_whole(text)
