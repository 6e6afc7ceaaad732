"""Incremental detokenization for streamed replies.

A byte-level BPE token can end in the middle of a UTF-8 character, so decoding each
chunk on its own would emit U+FFFD. We decode a short window and emit only text that has
become stable (the usual prefix/read-offset scheme of vLLM and TGI).
"""

from __future__ import annotations

from roost.rollout.chat.tokenizer import ChatTokenizer


class IncrementalDecoder:
    def __init__(self, tokenizer: ChatTokenizer, *, skip_special_tokens: bool = True):
        self._tok = tokenizer
        self._skip = skip_special_tokens
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def push(self, ids: list[int]) -> str:
        self._ids.extend(ids)
        prefix_text = self._tok.decode(self._ids[self._prefix : self._read], skip_special_tokens=self._skip)
        full_text = self._tok.decode(self._ids[self._prefix :], skip_special_tokens=self._skip)
        if len(full_text) > len(prefix_text) and not full_text.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self._ids)
            return full_text[len(prefix_text) :]
        return ""

    def flush(self) -> str:
        """Whatever is still held back (an unfinished character at the very end)."""
        prefix_text = self._tok.decode(self._ids[self._prefix : self._read], skip_special_tokens=self._skip)
        full_text = self._tok.decode(self._ids[self._prefix :], skip_special_tokens=self._skip)
        self._prefix = self._read = len(self._ids)
        return full_text[len(prefix_text) :]
