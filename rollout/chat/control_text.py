"""Control-token text in what a client sends stays text.

Control tokens (`<|im_start|>`, `<|im_end|>`, `<tool_call>`, ...) belong where the chat
template's own markup puts them. A client string that happens to spell one (a pasted chat
transcript, a web page in a tool result, code about chat formats) must reach the model as
the characters it is, or message content could open a turn of its own.

So before rendering, each such spelling in a client string is replaced by an escape: ESCAPE
and one character naming the token (ESCAPE itself becomes ESCAPE ESCAPE). The template
passes escapes through like any other text, and the tokenizer, which splits the rendering at
the control tokens the template wrote, turns each escape back into the token's spelling and
tokenizes it as plain text (`ChatTokenizer.encode_array`). A template that inspects content
for a token's spelling (Qwen's `'</think>' in content`) no longer finds it there.
"""

from __future__ import annotations

import re
from typing import Any

ESCAPE = "\ue000"  # private use: no text or template gives it a meaning
_FIRST_CODE = 0xF0000  # the n-th control token's escape is ESCAPE + chr(_FIRST_CODE + n)


class ControlText:
    """Escapes and unescapes the spellings of one tokenizer's added tokens."""

    def __init__(self, tokens: list[str]):
        self.tokens = list(tokens)
        self._escapes = {token: ESCAPE + chr(_FIRST_CODE + n) for n, token in enumerate(self.tokens)}
        self._escapes[ESCAPE] = ESCAPE + ESCAPE
        longest_first = sorted(self._escapes, key=len, reverse=True)
        self._spelled = re.compile("|".join(re.escape(t) for t in longest_first))
        self._first_chars = sorted({t[0] for t in self._escapes})
        self._escaped = re.compile(re.escape(ESCAPE) + "(.)", re.DOTALL)

    def escape(self, value: Any) -> Any:
        """`value` (a string, or lists and dicts of them, keys included) with every control
        token's spelling escaped (a string without one is returned as it is)."""
        if isinstance(value, str):
            return self._spelled.sub(self._escape_match, value) if self._spells_a_token(value) else value
        if isinstance(value, dict):
            return {self.escape(k): self.escape(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.escape(v) for v in value]
        return value

    def _spells_a_token(self, text: str) -> bool:
        # Most strings hold no token's first character, and `in` finds that out many times
        # faster than the pattern: this runs for every string of every call.
        for char in self._first_chars:
            if char in text:
                return self._spelled.search(text) is not None
        return False

    def _escape_match(self, match: re.Match) -> str:
        return self._escapes[match[0]]

    def literal(self, text: str) -> str:
        """`text` for a tokenizer that unescapes, when its control-token spellings are meant
        (a raw prompt): only ESCAPE itself is escaped."""
        return text.replace(ESCAPE, ESCAPE + ESCAPE) if ESCAPE in text else text

    def unescape(self, text: str) -> str:
        return self._escaped.sub(self._spelling, text)

    def _spelling(self, match: re.Match) -> str:
        code = match[1]
        if code == ESCAPE:
            return ESCAPE
        n = ord(code) - _FIRST_CODE
        return self.tokens[n] if 0 <= n < len(self.tokens) else match[0]
