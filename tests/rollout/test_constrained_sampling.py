"""Drawing under a grammar gives the masked distribution exactly: p(t) / p(allowed) for each
allowed token, whether the row draws first and redraws when refused (temperature only, greedy) or
is masked before it draws (top-k, top-p, min-p); whether a refused row draws again from its own
distribution first or not; and whether a masked row draws among its few allowed tokens or over
the whole masked vocabulary. Checked with a chi-square test over many seeds on a twelve-token
vocabulary."""

from __future__ import annotations

import pytest
import torch
import xgrammar
from scipy.stats import chisquare

from roost.rollout.engine.constrained_sampling import GrammarSampler, Redraw
from roost.rollout.engine.grammar import Grammar
from roost.rollout.engine.sampling import RowDraw, SamplingConfig

VOCAB = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "<eos>"]
LOGITS = torch.tensor([2.0, 1.5, 1.2, 1.0, 0.6, 0.3, 0.0, -0.4, -0.9, -1.5, -2.2, -3.0])
ALLOWED = [2, 5, 8]  # "c", "f", "i": the tokens the regex allows first (a third of the mass)
DRAWS = 20_000
MASKED = {"among the allowed": Redraw(retries=0), "whole row": Redraw(retries=0, short_row=0)}
REDRAWS = pytest.mark.parametrize("redraw", [Redraw(), *MASKED.values()], ids=["retries first", *MASKED])


def grammar() -> Grammar:
    info = xgrammar.TokenizerInfo(VOCAB, stop_token_ids=[len(VOCAB) - 1])
    return Grammar("regex", xgrammar.GrammarCompiler(info).compile_regex("[cfi]x?"))


def draw_many(config: SamplingConfig, redraw: Redraw) -> list[int]:
    compiled = grammar()
    logits = LOGITS.repeat(DRAWS, 1)
    return GrammarSampler(redraw).choose(
        logits,
        [config] * DRAWS,
        [RowDraw(seed, 0) for seed in range(DRAWS)],
        [compiled.matcher() for _ in range(DRAWS)],
    )


@REDRAWS
@pytest.mark.parametrize(
    "config",
    [SamplingConfig(), SamplingConfig(temperature=0.7), SamplingConfig(top_k=8)],
    ids=["temperature 1: draw, redraw if refused", "temperature 0.7", "top-k 8: mask first"],
)
def test_draws_follow_the_masked_distribution(config, redraw):
    counts = torch.bincount(torch.tensor(draw_many(config, redraw)), minlength=len(VOCAB))
    assert counts.sum() == counts[ALLOWED].sum() == DRAWS
    probs = torch.softmax(LOGITS[ALLOWED].double() / config.temperature, -1)
    assert chisquare(counts[ALLOWED].numpy(), (probs * DRAWS).numpy()).pvalue > 1e-3


def test_a_redraw_among_the_allowed_tokens_is_the_masked_rows_draw():
    """The short row holds the allowed tokens' logits in vocabulary order: same number, same token."""
    config = SamplingConfig(temperature=0.7)
    assert draw_many(config, MASKED["among the allowed"]) == draw_many(config, MASKED["whole row"])


@REDRAWS
def test_greedy_takes_the_best_allowed_token(redraw):
    compiled = grammar()
    tokens = GrammarSampler(redraw).choose(
        LOGITS.repeat(2, 1), [SamplingConfig(temperature=0)] * 2, [RowDraw(0, 0)] * 2, [compiled.matcher(), None]
    )
    assert tokens == [2, 0]  # "c" under the grammar; the unconstrained row keeps "a"
