"""A call's tokens as the page shows them: text, colour and the hover line of each.

Text comes from the run's tokenizer when one is found (`tokenizer.json` in the model folder);
otherwise the page shows ids. Colours: `logprob` shades sampled tokens by the probability
the engine gave them; `advantage` and `reward` by sign and size (green above 0, red below).
Prompt tokens are grey: nothing was sampled there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

COLOURINGS = ("logprob", "advantage", "reward")


@dataclass
class TokenCell:
    text: str
    css: str
    colour: str
    hover: str


class TokenText:
    """Decodes single ids with a `tokenizers` tokenizer; `None` folder: ids only."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        self._tokenizer = None
        if folder is not None:
            from tokenizers import Tokenizer

            self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))

    @classmethod
    def find(cls, candidates: list[Path]) -> TokenText:
        for folder in candidates:
            if (folder / "tokenizer.json").is_file():
                return cls(folder)
        return cls(None)

    def texts(self, ids: list[int]) -> list[str]:
        if self._tokenizer is None:
            return [f"⟨{i}⟩" for i in ids]
        return self._tokenizer.decode_batch([[i] for i in ids], skip_special_tokens=False)


def cells(
    texts: list[str],
    ids: list[int],
    logprobs: list[float | None],
    *,
    start: int,
    prompt_len: int,
    shared: int,
    version: str,
    colouring: str,
    score: list[float] | float | None,
) -> list[TokenCell]:
    """One cell per token; `score` is the advantage or reward (one value, or one per sampled token)."""
    out = []
    for k, (text, tid, lp) in enumerate(zip(texts, ids, logprobs)):
        pos = start + k
        sampled = pos >= prompt_len
        value = _score(score, pos - prompt_len) if sampled else None
        colour = _colour(colouring, lp, value) if sampled else ""
        css = "tok s" if sampled else ("tok p shared" if pos < shared else "tok p")
        hover = f"#{pos} id {tid} {text!r}" + (
            f" logprob {lp:.4f}" if lp is not None else " (no logprob)" if sampled else " (prompt)"
        )
        hover += (f" {colouring} {value:+.4f}" if value is not None else "") + f" weights v{version}"
        out.append(TokenCell(text, css, colour, hover))
    return out


def _score(score: list[float] | float | None, index: int) -> float | None:
    if isinstance(score, list):
        return score[index] if 0 <= index < len(score) else None
    return score


def _colour(colouring: str, logprob: float | None, value: float | None) -> str:
    if colouring == "logprob":
        if logprob is None:
            return ""
        p = math.exp(max(logprob, -50.0))
        return f"hsl({round(120 * p)}, 70%, 82%)"  # red when unlikely, green when certain
    if value is None:
        return ""
    strength = min(1.0, abs(value))
    hue = 120 if value >= 0 else 0
    return f"hsl({hue}, 70%, {round(95 - 25 * strength)}%)"
