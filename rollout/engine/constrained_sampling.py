"""Choosing the next tokens of a batch where some rows are held to a grammar.

Masking a row costs a pass over the whole vocabulary (xgrammar's bitmask applied to 150k logits
takes several times a softmax on CPU), so rows that sample by temperature alone, or greedily,
draw from the model first and keep the token when their grammar allows it; only the rows whose
token it forbids are masked and drawn again, with a fresh random number. Together the two steps
draw from the masked distribution exactly: P(t) = p(t) + p(not A) p(t)/p(A) = p(t)/p(A) for an
allowed t. A model that already follows its grammar pays for the mask only where it strays. Rows
with top-k, top-p or min-p are masked before they draw: truncating first and masking after would
keep another set of tokens.
"""

from __future__ import annotations

import torch

from .grammar import GrammarState
from .sampling import RowDraw, SamplingConfig, choose_tokens


def choose_in_grammars(logits: torch.Tensor, configs: list[SamplingConfig], draws: list[RowDraw],
                       grammars: list[GrammarState | None]) -> list[int]:
    """`choose_tokens` over `logits` [B, V] (masked in place), each row with a grammar held to it."""
    rows = [row for row, grammar in enumerate(grammars) if grammar is not None]
    if not rows:
        return choose_tokens(logits, configs, draws)
    import xgrammar

    bitmask = xgrammar.allocate_token_bitmask(logits.shape[0], logits.shape[-1])
    for row in rows:
        grammars[row].matcher.fill_next_token_bitmask(bitmask, row)
    first = [row for row in rows if configs[row].truncates]
    if first:
        xgrammar.apply_token_bitmask_inplace(logits, bitmask, indices=first)
    tokens = choose_tokens(logits, configs, draws)
    redo = [row for row, ok in zip(rows, _allowed(bitmask, rows, [tokens[r] for r in rows])) if not ok]
    if redo:
        xgrammar.apply_token_bitmask_inplace(logits, bitmask, indices=redo)
        redrawn = choose_tokens(logits[redo], [configs[r] for r in redo], [draws[r].second() for r in redo])
        for row, token in zip(redo, redrawn):
            tokens[row] = token
    return tokens


def _allowed(bitmask: torch.Tensor, rows: list[int], tokens: list[int]) -> list[bool]:
    """Whether each row's token has its bit set (bit t % 32 of word t // 32, as xgrammar packs it)."""
    token = torch.tensor(tokens)
    words = bitmask[torch.tensor(rows), token // 32]
    return ((words >> (token % 32)) & 1).bool().tolist()
