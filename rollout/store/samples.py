"""Samples: the one data contract between rollout and trainer.

A sample is one agent's root-to-leaf path through a session's token tree: the exact token
ids the engine saw and sampled, with loss mask 1 on sampled tokens only, the engine's
logprob of each sampled token, and which call (and so which weight version) sampled it.
Rewards and posted advantages ride along; everything the trainer computes afterwards
(advantages, loss weights) is derived from samples, never from text. The store builds them
from the gateway's records (`paths`), the trainer trains on them, and the export writes
them out; every builder goes through `build_sample`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from roost.outcome import EpisodeOutcome, SessionStatus


class SampleError(ValueError):
    """A sample breaks the contract (lengths, masks, non-finite values)."""


@dataclass(frozen=True)
class Refused:
    """A recorded call the store does not turn into training data, and why (a pass-through
    call whose upstream returned no token ids or no logprobs: `CallRecord.untrainable`).
    Every path through it is left out; the rest of its session is trained on."""

    session_id: str
    agent_id: str
    call_id: str
    reason: str

    def message(self) -> str:
        return (
            f"call {self.call_id} (session {self.session_id}, agent {self.agent_id}) is not training data: "
            f"{self.reason}; record through a token engine (--backend vllm, sglang or embedded) to train on it"
        )


@dataclass(frozen=True)
class CallRef:
    """One model call that sampled tokens of a sample."""

    call_id: str
    weight_version: str
    reward: float | None = None
    """A reward posted for this call alone (a step reward), if any."""
    advantage: float | None = None
    """An advantage posted for this call; takes precedence over estimators."""
    constraint: tuple[str, Any] | None = None
    """The grammar that held the call's reply, as its sampling field and value (`json_schema`,
    `regex`, `ebnf` or `choice`); None for a free reply."""
    adapter: str = ""
    """The LoRA adapter that sampled the call's tokens; "": the base model."""


@dataclass
class Sample:
    """One agent's root-to-leaf path in a session, ready for training."""

    session_id: str
    group_id: str
    """The session's group (GRPO: same task, several rollouts); a session without one is a
    group of its own, named by its session id."""
    agent_id: str
    tokens: list[int]
    loss_mask: list[int]
    """1 on tokens the model sampled (the only ones trained on), 0 on prompt/observation tokens."""
    rollout_logprobs: list[float]
    """The engine's logprob of each token as sampled; ignored where loss_mask is 0."""
    token_call: list[int]
    """Index into `calls` of the call that sampled each token; -1 where loss_mask is 0."""
    calls: list[CallRef]
    """The calls whose sampled tokens are in the sample, root to leaf."""
    reward: float | None = None
    """This agent's reward in the session (agent reward, else the session's; the latest of
    each). Rewards posted on calls are step rewards, on `calls`."""
    advantages: list[float | None] | None = None
    """Per-token advantages posted to the gateway (None where none was posted; a call's scalar
    covers its sampled tokens); posted values take precedence over estimators."""
    # Where the sample was recorded; left at their defaults for samples built otherwise.
    task: dict[str, Any] = field(default_factory=dict)
    parent_agent: str | None = None
    """The agent that spawned this one."""
    leaf_call_id: str | None = None
    call_ids: list[str] = field(default_factory=list)
    """Every call on the path, root to leaf, including those whose sampled tokens a later call
    rewrote (so not all of them are in `calls`)."""
    finish_reason: dict[str, Any] = field(default_factory=dict)
    """The leaf call's finish reason (SGLang's {"type": stop|length|abort, ...})."""
    images: list[str] = field(default_factory=list)
    """The sha256 of each image in `tokens`, in token order (each one's placeholder ids are a run
    of the model's image token): the trainer fetches their bytes (`GET /images/{sha256}`) to
    rebuild the pixel values."""
    routed_experts: list[list[int]] | None = None
    """Each token's experts as the engine routed it (R3, recorded with the gateway's
    record_routing): a row of layers x top_k expert ids per token, layer by layer; an empty row
    where nothing was recorded (the last token, never run through the model; a call recorded
    without routing). A position that several calls of the path ran takes the latest call's row.
    None: a dense model, or nothing recorded."""
    teacher_logprobs: list[float] | None = None
    """A teacher's logprob of each token given the ones before it (NaN for the first), set by
    on-policy distillation (`roost.trainer.distill`) before advantages; None elsewhere."""

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def num_sampled(self) -> int:
        return sum(self.loss_mask)

    def weight_version_of(self, index: int) -> str | None:
        """The weight version that sampled token `index`, None for context tokens."""
        call = self.token_call[index]
        return None if call < 0 else self.calls[call].weight_version

    def spans(self) -> list[tuple[int, int, int]]:
        """(index into `calls`, start, end) of each run of sampled tokens, in token order."""
        spans: list[tuple[int, int, int]] = []
        for i, (mask, call) in enumerate(zip(self.loss_mask, self.token_call)):
            if not mask:
                continue
            if spans and spans[-1][0] == call and spans[-1][2] == i:
                spans[-1] = (call, spans[-1][1], i + 1)
            else:
                spans.append((call, i, i + 1))
        return spans

    def validate(self) -> Sample:
        """Check the contract; raise `SampleError` saying what is wrong. Returns self."""
        n = len(self.tokens)
        where = f"sample of session {self.session_id!r}, agent {self.agent_id!r}"
        for name in ("loss_mask", "rollout_logprobs", "token_call"):
            if len(getattr(self, name)) != n:
                raise SampleError(f"{where}: {name} has {len(getattr(self, name))} entries for {n} tokens")
        if self.advantages is not None and len(self.advantages) != n:
            raise SampleError(f"{where}: advantages has {len(self.advantages)} entries for {n} tokens")
        if self.routed_experts is not None and len(self.routed_experts) != n:
            raise SampleError(f"{where}: routed_experts has {len(self.routed_experts)} rows for {n} tokens")
        if n == 0:
            raise SampleError(f"{where}: no tokens")
        if any(m not in (0, 1) for m in self.loss_mask):
            raise SampleError(f"{where}: loss_mask must hold only 0 and 1")
        if self.loss_mask[0]:
            raise SampleError(f"{where}: the first token cannot be sampled (nothing precedes it)")
        for i, (m, c) in enumerate(zip(self.loss_mask, self.token_call)):
            if m and not 0 <= c < len(self.calls):
                raise SampleError(f"{where}: sampled token {i} names call {c}, but there are {len(self.calls)} calls")
            if m and not math.isfinite(self.rollout_logprobs[i]):
                raise SampleError(f"{where}: rollout logprob of sampled token {i} is {self.rollout_logprobs[i]}")
        if self.reward is not None and not math.isfinite(self.reward):
            raise SampleError(f"{where}: reward is {self.reward}; fix the reward function or drop the session")
        if self.advantages is not None and not all(a is None or math.isfinite(a) for a in self.advantages):
            raise SampleError(f"{where}: posted advantages hold non-finite values")
        return self

    @classmethod
    def from_turns(
        cls,
        turns: list[tuple[list[int], list[int], list[float]]],
        *,
        session_id: str,
        group_id: str,
        agent_id: str = "main",
        reward: float | None = None,
        weight_version: str = "0",
    ) -> Sample:
        """Build a sample from (context ids, sampled ids, sampled logprobs) per call.

        Each call's context is the tokens appended since the previous call (prompt,
        tool results, the next user turn); handy for tests and recorded fixtures.
        """
        tokens: list[int] = []
        spans = []
        for index, (context, sampled, sampled_logprobs) in enumerate(turns):
            if len(sampled) != len(sampled_logprobs):
                raise SampleError(f"call {index}: {len(sampled)} sampled ids but {len(sampled_logprobs)} logprobs")
            tokens += list(context)
            call = CallRef(call_id=f"{session_id}/{agent_id}/{index}", weight_version=weight_version)
            spans.append(SampledSpan(len(tokens), len(tokens) + len(sampled), call, sampled_logprobs))
            tokens += list(sampled)
        return build_sample(
            tokens, spans, session_id=session_id, group_id=group_id, agent_id=agent_id, reward=reward
        ).validate()


@dataclass
class SessionSamples:
    """One session as the trainer takes it: how its episode ended, every root-to-leaf sample of
    its token trees (`roost.rollout.store.paths.session_samples`) and the calls refused on the way.
    The gateway serves these pages (`GET /samples`); the RL batch is made of them."""

    session_id: str
    group_id: str | None
    status: SessionStatus
    outcome: EpisodeOutcome | None
    """None while the session is open."""
    samples: list[Sample]
    refused: list[Refused]


@dataclass(frozen=True)
class SampledSpan:
    """Tokens `start .. end` of a sample, sampled by one call."""

    start: int
    end: int
    call: CallRef
    logprobs: Sequence[float]
    """The engine's logprob of each token of the span, in order."""
    advantages: Sequence[float | None] | None = None
    """Advantages posted for the span's tokens (one per token), if any."""


def build_sample(
    tokens: list[int],
    spans: list[SampledSpan],
    *,
    session_id: str,
    group_id: str,
    agent_id: str,
    reward: float | None = None,
    task: dict[str, Any] | None = None,
    parent_agent: str | None = None,
    leaf_call_id: str | None = None,
    call_ids: list[str] | None = None,
    finish_reason: dict[str, Any] | None = None,
    images: list[str] | None = None,
    routed_experts: list[list[int]] | None = None,
) -> Sample:
    """The one way a `Sample` is made from its parts: the path's tokens and the spans its calls
    sampled (loss mask 1 there, 0 elsewhere), root to leaf; each span's call is one of `calls`,
    even one that sampled nothing. Not validated: callers that take input from outside do."""
    n = len(tokens)
    mask, logprobs, token_call = [0] * n, [0.0] * n, [-1] * n
    posted: list[float | None] = [None] * n
    for index, span in enumerate(spans):
        for offset, i in enumerate(range(span.start, span.end)):
            mask[i], logprobs[i], token_call[i] = 1, span.logprobs[offset], index
            if span.advantages is not None:
                posted[i] = span.advantages[offset]
    return Sample(
        session_id=session_id,
        group_id=group_id,
        agent_id=agent_id,
        tokens=tokens,
        loss_mask=mask,
        rollout_logprobs=logprobs,
        token_call=token_call,
        calls=[span.call for span in spans],
        reward=reward,
        advantages=posted if any(a is not None for a in posted) else None,
        task=task or {},
        parent_agent=parent_agent,
        leaf_call_id=leaf_call_id,
        call_ids=call_ids or [],
        finish_reason=finish_reason or {},
        images=images or [],
        routed_experts=routed_experts,
    )
