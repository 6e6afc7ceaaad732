"""One generation request inside the engine: its settings, progress and stop checks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from roost.rollout.engine.grammar import Grammar, GrammarState
from roost.rollout.engine.lora_rows import LoadedAdapter
from roost.rollout.engine.prompt_images import PromptImages
from roost.rollout.engine.sampling import RowDraw, SamplingConfig, new_seed


@dataclass(frozen=True)
class StepOutput:
    """What one decode step produced for one request."""

    token_id: int
    logprob: float
    finish_reason: dict[str, Any] | None
    weight_version: str
    cached_tokens: int = 0
    """Prompt tokens whose keys and values were reused from an earlier request."""
    routed_experts: np.ndarray | None = None
    """On a finished request's last output, when its plan asks (`routed_experts_from`): the experts
    each token run through the model went to, [tokens, layers, top_k]."""


@dataclass
class RequestPlan:
    """Everything the scheduler needs to run a request, fixed at admission."""

    sampling: SamplingConfig
    max_new_tokens: int
    stop_token_ids: frozenset[int]
    stop_strings: tuple[str, ...] = ()
    min_new_tokens: int = 0
    forced_ids: list[int] | None = None  # the scripted sampler's reply
    seed: int | None = None
    grammar: Grammar | None = None
    adapter: LoadedAdapter | None = None
    """The LoRA adapter the request runs with (None: the base model)."""
    session: str | None = None
    """The program (an agent's episode) it is a call of (`session_params.id`): its slot is retained
    for that session's next call, within the engine's KV budget."""
    routed_experts_from: int | None = None
    """Report the routed experts of the tokens at positions from this one (SGLang's
    `routed_experts_start_len`) to the last one run through the model; None: not asked."""
    images: PromptImages | None = None
    """The prompt's images (a vision model's request with `image_data`); None: text only."""

    def constraint_meta(self) -> dict[str, Any] | None:
        """What an answer's meta_info says about the request's grammar (None: unconstrained)."""
        return None if self.grammar is None else self.grammar.meta()


@dataclass
class EngineRequest:
    rid: str
    prompt_ids: list[int]
    plan: RequestPlan
    emit: Callable[[list[StepOutput]], None]
    decode: Callable[[list[int]], str]
    output_ids: list[int] = field(default_factory=list)
    slot: int | None = None
    cached_tokens: int = 0
    cancelled: bool = False
    finished: bool = False
    seed: int = 0
    """The seed of this request's draws: its own `sampling_seed`, else a fresh random one."""
    grammar: GrammarState | None = None
    """Where the reply is in the plan's grammar, if it has one."""
    _stop_scan_from: int = 0

    def __post_init__(self) -> None:
        self.seed = new_seed() if self.plan.seed is None else self.plan.seed
        if self.plan.grammar is not None:
            self.grammar = self.plan.grammar.matcher()

    def draw(self) -> RowDraw:
        """Where this step's random number comes from (the step is the tokens sampled so far)."""
        return RowDraw(self.seed, len(self.output_ids))

    @property
    def cache_key(self) -> np.ndarray:
        """The prompt as the slot cache compares it: its ids, each image's run as its content address."""
        if self.plan.images is None:
            return np.asarray(self.prompt_ids, dtype=np.int64)
        return self.plan.images.cache_key(self.prompt_ids)

    @property
    def rope_delta(self) -> int:
        """How far past its index a reply token turns (nonzero after images: `rope_delta`)."""
        return 0 if self.plan.images is None else self.plan.images.delta

    @property
    def fed_tokens(self) -> int:
        """Tokens run through the model so far: the prompt and all but the last sampled token."""
        return len(self.prompt_ids) + max(len(self.output_ids) - 1, 0)

    @property
    def position(self) -> int:
        """Where the next fed token goes in the KV cache (the last sampled one)."""
        return len(self.prompt_ids) + len(self.output_ids) - 1

    def forced_token(self) -> int | None:
        forced = self.plan.forced_ids
        if forced is None:
            return None
        return forced[min(len(self.output_ids), len(forced) - 1)]

    def masks_stop_tokens(self) -> bool:
        # with a grammar, the grammar says where the reply may end
        return self.grammar is None and len(self.output_ids) < self.plan.min_new_tokens

    def finish_reason(self, token: int, context_left: int) -> dict[str, Any] | None:
        """Called after `token` was appended to `output_ids`."""
        if self.grammar is not None:
            ended = self.grammar.advance(token)
            if ended is not None:
                return ended
        if len(self.output_ids) > self.plan.min_new_tokens - 1:
            if token in self.plan.stop_token_ids:
                return {"type": "stop", "matched": token}
            matched = self._matched_stop_string()
            if matched is not None:
                return {"type": "stop", "matched": matched}
        if len(self.output_ids) >= self.plan.max_new_tokens or context_left <= 0:
            return {"type": "length", "length": len(self.output_ids)}
        return None

    def _matched_stop_string(self) -> str | None:
        if not self.plan.stop_strings:
            return None
        text = self.decode(self.output_ids)
        longest = max(len(s) for s in self.plan.stop_strings)
        start = max(0, self._stop_scan_from - longest + 1)
        self._stop_scan_from = len(text)
        for stop in self.plan.stop_strings:
            if stop and text.find(stop, start) >= 0:
                return stop
        return None
