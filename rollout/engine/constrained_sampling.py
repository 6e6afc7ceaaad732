"""Choosing the next tokens of a batch where some rows are held to a grammar.

Masking a row costs a pass over the whole vocabulary (xgrammar's bitmask applied to 150k logits
takes several times a softmax on CPU), so rows that sample by temperature alone, or greedily,
draw from the model first and keep the token when their grammar allows it. A refused sampled row
draws again from the same distribution (a binary search in the cumulative masses the first draw
computed) up to `Redraw.retries` times, and keeps the first allowed token; a row still refused
(or greedy) is drawn from its allowed tokens only, with a fresh random number. Together the steps
draw from the masked distribution exactly: with n = retries + 1 unmasked draws, P(t) = p(t) (1 +
q + ... + q^(n-1)) + q^n p(t)/p(A) = p(t)/p(A) for an allowed t, where q = p(not A). A model that
already follows its grammar pays for the mask only where it strays. Rows with top-k, top-p or
min-p are masked before they draw: truncating first and masking after would keep another set of
tokens.

Where a row strays, its grammar mostly allows a handful of tokens (the punctuation and keys of a
JSON schema, the next characters of a regex), which the model's distribution rarely reaches: a
row that allows at most `Redraw.short_row` tokens draws among just those, gathered into a short
row, instead of masking and drawing over all 150k. That draw is the masked row's: the same
tokens, with the same logits, in the same order.

Small tensor work here goes row by row: an op over more than 32k elements (a batch of bitmask
rows) runs on torch's thread pool, whose hand-off alone costs milliseconds on a loaded CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from roost.rollout.engine.grammar import GrammarState
from roost.rollout.engine.sampling import Drawn, RowDraw, SamplingConfig, choose_tokens, draw


@dataclass(frozen=True)
class Redraw:
    """How a row whose grammar refused its first token draws again (each way is exact)."""

    retries: int = 4
    """Further draws from the row's own distribution before it is masked; the allowed tokens of a
    refused row inside a JSON string hold most of the mass, those of its keys and punctuation
    almost none."""
    short_row: int = 1024
    """Allowed tokens a masked row may have for it to draw among them alone, from a row of this
    many logits whatever the batch; a row that allows more is masked whole."""


class GrammarSampler:
    """Chooses the tokens of the engine's batches (engine thread only), keeping one bitmask
    buffer between steps: a fresh 600 KB one each step costs its page faults and its fill."""

    def __init__(self, redraw: Redraw = Redraw()):
        self.redraw = redraw
        self._bitmask = torch.empty(0, 0, dtype=torch.int32)

    def choose(
        self,
        logits: torch.Tensor,
        configs: list[SamplingConfig],
        draws: list[RowDraw],
        grammars: list[GrammarState | None],
    ) -> list[int]:
        """`choose_tokens` over `logits` [B, V] (masked in place), each row with a grammar held to it."""
        rows = [row for row, grammar in enumerate(grammars) if grammar is not None]
        if not rows:
            return choose_tokens(logits, configs, draws)
        import xgrammar

        bitmask = self._bitmask_for(*logits.shape)
        for row in rows:  # a fill writes every word of its row: the rows of the last step do not show through
            grammars[row].matcher.fill_next_token_bitmask(bitmask, row)
        first = [row for row in rows if configs[row].truncates]
        if first:
            xgrammar.apply_token_bitmask_inplace(logits, bitmask, indices=first)
        drawn = draw(logits, configs, draws)
        refused = [
            row
            for row, ok in zip(rows, token_allowed(bitmask, rows, torch.tensor(drawn.tokens)[rows]).tolist())
            if not ok
        ]
        retried = _retry(
            drawn, bitmask, [row for row in refused if not configs[row].greedy], draws, self.redraw.retries
        )
        tokens = [retried.get(row, token) for row, token in enumerate(drawn.tokens)]
        masked = [row for row in refused if row not in retried]
        if masked:
            again = [draws[row].again(self.redraw.retries + 1) for row in masked]
            chosen = _draw_masked(
                logits, bitmask, masked, [configs[row] for row in masked], again, self.redraw.short_row
            )
            for row, token in zip(masked, chosen):
                tokens[row] = token
        return tokens

    def _bitmask_for(self, batch: int, vocab_size: int) -> torch.Tensor:
        words = (vocab_size + 31) // 32
        if self._bitmask.shape[0] < batch or self._bitmask.shape[1] != words:
            self._bitmask = torch.empty(batch, words, dtype=torch.int32)
        return self._bitmask[:batch]


def _retry(drawn: Drawn, bitmask: torch.Tensor, rows: list[int], draws: list[RowDraw], attempts: int) -> dict[int, int]:
    """The first allowed token of `attempts` further draws of each of the sampled `rows`, for the
    rows that got one."""
    if not rows or not attempts:
        return {}
    tries = drawn.again(rows, [draws[row] for row in rows], attempts)
    ok = token_allowed(bitmask, rows, tries)
    first = tries.gather(1, ok.int().argmax(dim=-1, keepdim=True))[:, 0]  # argmax: the first True
    return {row: token for row, token, got in zip(rows, first.tolist(), ok.any(dim=-1).tolist()) if got}


def _draw_masked(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    rows: list[int],
    configs: list[SamplingConfig],
    draws: list[RowDraw],
    short_row: int,
) -> list[int]:
    """Draw `rows` (with their `configs` and `draws`) from their masked distributions."""
    allowed = [_allowed_ids(bitmask[row], short_row, logits.shape[-1]) for row in rows]
    sparse = [i for i, ids in enumerate(allowed) if ids is not None]
    dense = [i for i, ids in enumerate(allowed) if ids is None]
    chosen: dict[int, int] = {}
    if sparse:
        short, ids = _short_rows(logits, [rows[i] for i in sparse], [allowed[i] for i in sparse], short_row)
        picked = choose_tokens(short, [configs[i] for i in sparse], [draws[i] for i in sparse])
        chosen.update((i, int(ids[n, p])) for n, (i, p) in enumerate(zip(sparse, picked)))
    if dense:
        import xgrammar

        # xgrammar's kernel is quick on rows that allow most tokens, slow on those that allow few
        xgrammar.apply_token_bitmask_inplace(logits, bitmask, indices=[rows[i] for i in dense])
        picked = choose_tokens(logits[[rows[i] for i in dense]], [configs[i] for i in dense], [draws[i] for i in dense])
        chosen.update(zip(dense, picked))
    return [chosen[i] for i in range(len(rows))]


def _allowed_ids(words: torch.Tensor, most: int, vocab_size: int) -> torch.Tensor | None:
    """The token ids one bitmask row allows, in vocabulary order, when there are at most `most`
    of them; else None."""
    filled = words.nonzero()[:, 0]
    if len(filled) > most:  # each word that allows something allows a token at least
        return None
    bits = torch.arange(32, dtype=torch.int32)
    ids = (filled[:, None] * 32 + bits)[((words[filled, None] >> bits) & 1).bool()]  # bit t % 32 of word t // 32
    ids = ids[ids < vocab_size]
    return ids if len(ids) <= most else None


def _short_rows(
    logits: torch.Tensor, rows: list[int], allowed: list[torch.Tensor], width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's allowed logits in a row of `width` (-inf after them, which `choose_tokens` never
    picks; a width that does not depend on the batch keeps a seeded row's draw the same in any
    batch), and the token id of each slot."""
    short = torch.full((len(rows), width), float("-inf"), dtype=logits.dtype)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    for n, (row, row_ids) in enumerate(zip(rows, allowed)):
        short[n, : len(row_ids)] = logits[row, row_ids]
        ids[n, : len(row_ids)] = row_ids
    return short, ids


def token_allowed(bitmask: torch.Tensor, rows: list[int], tokens: torch.Tensor) -> torch.Tensor:
    """Whether each of `rows`' tokens ([len(rows)] or [len(rows), K]) has its bit set (bit t % 32
    of word t // 32, as xgrammar packs it)."""
    index = torch.tensor(rows, device=tokens.device).view(-1, *[1] * (tokens.dim() - 1))
    words = bitmask[index, tokens // 32]
    return ((words >> (tokens % 32)) & 1).bool()
