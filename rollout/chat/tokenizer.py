"""The model's tokenizer, encoding text one segment at a time between added tokens.

Hugging Face tokenizers split text at added tokens (`<|im_start|>`, `<tool_call>`, ...)
before anything else, so the ids of a rendered chat are the concatenation of the ids of its
segments. Caching segments makes re-tokenizing a long conversation cost only its new
segments. `segments_are_exact` checks the property for a tokenizer (added tokens that strip
neighbouring whitespace or normalize would break it); where it fails, whole texts are
encoded instead.

Control-token spellings a client sent are escaped before rendering (control_text.py); they
are tokenized here as the plain text they spell. A prompt can be refused as soon as it is
known to pass a token limit: by its length in characters before any work (no token of this
vocabulary stands for more than `max_chars_per_token` characters), then segment by segment.
Encoding may run on several threads at once (the gateway prepares big calls off its loop).
"""

from __future__ import annotations

import re
import threading
from array import array
from typing import Any

from tokenizers import Tokenizer, models

from roost.rollout.chat.control_text import ESCAPE, ControlText

PROBE = (
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n  Hello, wörld! 123 "
    '  tabs\t<think>\nhmm\n</think>\n\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    "<|im_end|>\n<|im_start|>assistant\n"
)
# From this length on a text is encoded with the batch call, which releases the GIL while it
# works (the gateway's event loop keeps running) and skips character offsets; shorter texts
# are faster through the plain call.
_BATCH_FROM_CHARS = 4096


class TooManyTokens(ValueError):
    """A text has more tokens than the limit it was encoded under."""

    def __init__(self, at_least: int, limit: int):
        super().__init__(f"at least {at_least} tokens, more than the limit of {limit}")
        self.at_least = at_least
        self.limit = limit


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
        self.control = ControlText(list(self.added_ids))
        self._plain = _without_added_tokens(backend)
        self._escapes = re.compile("(" + re.escape(ESCAPE) + ".)", re.DOTALL)
        self.max_chars_per_token = _max_chars_per_token(backend)
        self._cache: dict[str, array] = {}
        self._cache_entries = cache_entries
        self._cache_lock = threading.Lock()
        self.segmented = self._splitter is not None and self.segments_are_exact(PROBE)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode_whole(self, text: str) -> list[int]:
        return _ids(self.backend, text)

    def encode(self, text: str) -> list[int]:
        return self.encode_array(text).tolist()

    def tokens_at_least(self, chars: int) -> int:
        """Fewest tokens a text of `chars` characters can have (0 when the vocabulary gives no bound)."""
        return -(-chars // self.max_chars_per_token) if self.max_chars_per_token else 0

    def encode_array(self, text: str, limit: int | None = None) -> array:
        """Ids as `array('i')`: cached segments are copied in whole, no per-token Python work.
        With `limit`, raises TooManyTokens as soon as the ids are known to pass it."""
        _refuse_past(limit, self.tokens_at_least(len(text)))
        if not self.segmented:
            ids = self._encode_unsegmented(text)
            _refuse_past(limit, len(ids))
            return ids
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
            cached = cache.get(piece)  # a dict lookup is atomic: no lock to read
            if cached is None:
                _refuse_past(limit, len(ids) + self.tokens_at_least(len(piece)))
                cached = array("i", self._segment_ids(piece))
                _refuse_past(limit, len(ids) + len(cached))
                self._remember(piece, cached)
            ids.extend(cached)
        _refuse_past(limit, len(ids))
        return ids

    def _segment_ids(self, piece: str) -> list[int]:
        if ESCAPE in piece:
            return _ids(self._plain, self.control.unescape(piece))
        return _ids(self.backend, piece)

    def _remember(self, piece: str, ids: array) -> None:
        with self._cache_lock:
            if len(self._cache) >= self._cache_entries:
                # Evict the oldest tenth; dicts keep insertion order.
                for key in list(self._cache)[: self._cache_entries // 10]:
                    del self._cache[key]
            self._cache[piece] = ids

    def _encode_unsegmented(self, text: str) -> array:
        """Whole runs of text, with each escaped control-token spelling tokenized as plain text
        on its own (this tokenizer's segments are not exact anyway)."""
        if ESCAPE not in text:
            return array("i", self.encode_whole(text))
        ids = array("i")
        for n, run in enumerate(self._escapes.split(text)):
            if n % 2:
                ids.extend(_ids(self._plain, self.control.unescape(run)))
            elif run:
                ids.extend(self.encode_whole(run))
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


def _ids(tokenizer: Tokenizer, text: str) -> list[int]:
    if len(text) < _BATCH_FROM_CHARS:
        return tokenizer.encode(text, add_special_tokens=False).ids
    return tokenizer.encode_batch_fast([text], add_special_tokens=False)[0].ids


def _refuse_past(limit: int | None, at_least: int) -> None:
    if limit is not None and at_least > limit:
        raise TooManyTokens(at_least, limit)


def _without_added_tokens(backend: Tokenizer) -> Tokenizer:
    """The same tokenizer with no added tokens: their spellings are plain text to it. It
    shares the backend's model and pipeline (no copy)."""
    plain = Tokenizer(backend.model)
    plain.normalizer = backend.normalizer
    plain.pre_tokenizer = backend.pre_tokenizer
    plain.decoder = backend.decoder
    return plain


def _max_chars_per_token(backend: Tokenizer) -> int | None:
    """Most characters one token can stand for, or None where no bound holds.

    A BPE token is the merge of vocabulary pieces, each spelled by its entry (a byte-level
    entry has one character per byte, and a character takes at least one byte). A model
    that fuses a run of unknown characters into one token has no bound, nor do other kinds
    of model (WordPiece maps a whole unknown word to one token). A normalizer may compose
    characters first: Unicode canonical composition joins at most four code points into one.
    """
    model = backend.model
    if not isinstance(model, models.BPE) or (model.unk_token is not None and model.fuse_unk):
        return None
    longest = max((len(piece) for piece in backend.get_vocab(with_added_tokens=False)), default=1)
    return longest * (4 if backend.normalizer is not None else 1)
