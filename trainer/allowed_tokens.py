"""Which tokens the engine could draw at each sampled token of a call held to a grammar.

A constrained call's tokens were drawn from the model's distribution renormalised over the
tokens its grammar allowed. Trained on the unmasked distribution, a negative advantage moves
mass onto tokens the grammar never lets the engine sample, and no rollout ever pushes it back
(measured: with no KL term the next-token entropy climbed from 1.0 to 5.7 of ln 1024 in 26 steps
and held-out success fell). So the trainer trains the policy the engine sampled: it replays each
call's grammar (recorded in its sampling params, `CallRef.constraint`) over the call's sampled
tokens with xgrammar's matcher, the engine's own library and compiler settings, and takes each
token's logprob over the allowed tokens only.

    allowed = AllowedTokens(checkpoint_folder, spec)
    masks = allowed.masks(sample)   # [num_sampled, ceil(vocab / 32)] int32 bitmask, or None

Bit t % 32 of word t // 32 is set when token t was allowed (xgrammar's packing); a free reply's
rows allow every token, and so do those of a call whose tokens its grammar refuses on replay (an
engine with other grammar settings sampled it): that call is trained as with the mask off, and
`AllowedTokens.refused` says why.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import torch

from roost.rollout.engine.constrained_sampling import token_allowed
from roost.rollout.engine.grammar import compile_grammar, new_compiler
from roost.rollout.engine.model_spec import ModelSpec
from roost.rollout.store.samples import Sample

if TYPE_CHECKING:
    import xgrammar

log = logging.getLogger(__name__)
ALL = -1  # every bit of an int32 word
CACHED_GRAMMARS = 4096


class GrammarReplayError(ValueError):
    """A recorded call's sampled tokens do not follow its recorded grammar as replayed here."""


class AllowedTokens:
    """Replays recorded grammars for one model's vocabulary (compiled grammars are cached by
    their source, as in the engine)."""

    def __init__(self, checkpoint: Any, spec: ModelSpec):
        self._checkpoint = checkpoint
        self._spec = spec
        self._compiler: xgrammar.GrammarCompiler | None = None
        self.refused: list[str] = []
        """Why each call whose tokens its grammar refused on replay was trained unmasked."""
        self._compiled: OrderedDict[str, xgrammar.CompiledGrammar] = OrderedDict()

    @property
    def words(self) -> int:
        return (self._spec.vocab_size + 31) // 32

    def masks(self, sample: Sample) -> torch.Tensor | None:
        """The allowed tokens at each sampled token of `sample`, in token order; None when no call
        of it was constrained."""
        if not any(call.constraint for call in sample.calls):
            return None
        rows = torch.full((sample.num_sampled, self.words), ALL, dtype=torch.int32)
        row = 0
        for call, start, end in sample.spans():
            constraint = sample.calls[call].constraint
            if constraint:
                out = rows[row : row + end - start]
                try:
                    self._replay(constraint, sample.tokens[start:end], out, sample.calls[call].call_id)
                except GrammarReplayError as exc:
                    out.fill_(ALL)  # trained as a free reply, as with grammar_mask off
                    self.refused.append(str(exc))
                    log.warning("%s", exc)
            row += end - start
        return rows

    def _replay(self, constraint: Any, tokens: list[int], out: torch.Tensor, call_id: str) -> None:
        """Fill `out` (one row per token) with the allowed tokens before each of `tokens`, the start
        of a reply held to `constraint`."""
        import xgrammar

        matcher = xgrammar.GrammarMatcher(self._grammar(*constraint))
        for i, token in enumerate(tokens):
            matcher.fill_next_token_bitmask(out, i)
            if not matcher.accept_token(token):
                raise GrammarReplayError(
                    f"call {call_id}: sampled token {i} (id {token}) does not follow its recorded "
                    f"{constraint[0]} as roost's xgrammar reads it (an engine with other grammar settings, "
                    "SGLang's free JSON whitespace say, sampled it); the call is trained on the model's unmasked "
                    "distribution"
                )

    def _grammar(self, field: str, value: Any) -> xgrammar.CompiledGrammar:
        key = repr((field, value))
        if key in self._compiled:
            self._compiled.move_to_end(key)
        else:
            self._compiled[key] = compile_grammar(self._ready_compiler(), field, value)
            if len(self._compiled) > CACHED_GRAMMARS:  # admissible commands change every turn
                self._compiled.popitem(last=False)
        return self._compiled[key]

    def _ready_compiler(self) -> xgrammar.GrammarCompiler:
        if self._compiler is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self._checkpoint)
            self._compiler = new_compiler(tokenizer, self._spec.vocab_size, list(self._spec.eos_token_ids))
        return self._compiler


def allowed_counts(masks: torch.Tensor) -> torch.Tensor:
    """How many tokens each bitmask row allows, [rows]."""
    bits = torch.arange(32, dtype=torch.int32)
    return ((masks[..., None] >> bits) & 1).sum(dim=(-1, -2))


def shard_mask(masks: torch.Tensor, start: int, width: int) -> torch.Tensor:
    """The rows as booleans over vocabulary ids [start, start + width) (a tensor-parallel rank's
    shard of the output layer), [rows, width]; True = allowed."""
    ids = torch.arange(start, start + width, device=masks.device)
    return token_allowed(masks, list(range(len(masks))), ids.expand(len(masks), width))
