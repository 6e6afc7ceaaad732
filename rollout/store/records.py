"""The trajectory records: sessions, agents, calls, rewards and advantages.

Internal records are dataclasses; the store turns them into rows and back. Token ids are
kept as `array('i')` and logprobs as `array('d')` so that long prompts cost 4 and 8 bytes a
token in memory instead of a Python object each.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from roost.outcome import EpisodeOutcome, SessionStatus

# Bumped whenever a record's meaning changes; exports carry it. 2: a samples export row is a
# `Sample` record (it named `logprobs` and `spans` before).
FORMAT_VERSION = 2


IdArray: TypeAlias = "array[int]"
"""Token ids, 4 bytes each (typecode `i`)."""
FloatArray: TypeAlias = "array[float]"
"""Logprobs, 8 bytes each (typecode `d`)."""


def ids_array(values: Any = ()) -> IdArray:
    return values if isinstance(values, array) and values.typecode == "i" else array("i", values)


def logprob_array(values: Any = ()) -> FloatArray:
    return values if isinstance(values, array) and values.typecode == "d" else array("d", values)


@dataclass(frozen=True)
class ImageSpan:
    """One image a call's prompt carried: its content address and the placeholder ids it became
    (`count` ids from `offset` in the prompt)."""

    sha256: str
    offset: int
    count: int


@dataclass(frozen=True)
class ImageRecord:
    """An image's bytes as the harness sent them, stored once under their sha256."""

    sha256: str
    media_type: str
    data: bytes
    width: int
    height: int


@dataclass
class SessionRecord:
    """One episode's worth of calls, addressed by `session_id` and authenticated by its key."""

    session_id: str
    key_hash: str
    group_id: str | None = None
    task: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    reasoning_policy: str = "keep"
    status: SessionStatus = SessionStatus.OPEN
    created_at: float = 0.0
    finished_at: float | None = None
    outcome: EpisodeOutcome | None = None
    """How the episode ended (set when the session is finished)."""
    finish_info: dict[str, Any] = field(default_factory=dict)
    """What else the finishing client said about the episode, for people."""


@dataclass
class AgentRecord:
    """An agent of a session; `parent_agent` is the agent that spawned it, if any."""

    session_id: str
    agent_id: str
    parent_agent: str | None = None
    created_at: float = 0.0


@dataclass
class CallRecord:
    """One model call, token-exact: the ids the engine received and the ids it sampled.

    `parent_call_id` is the call whose token path (prompt + sampled) shares the longest
    prefix with this call's prompt, `shared_prefix_len` tokens long. `kind` says how:
    `extend` (the prompt starts with the parent's whole path), `fork` (it starts with a
    shorter part of it: history edited, reasoning dropped, a retry), `root` (no parent).
    `reuse` says how an `extend` was built: `exact` (the chat template re-renders the
    parent's reply exactly as sampled), `kept` (it does not, and the gateway kept the
    sampled tokens: reasoning policy `keep`), `none` (not built by reuse).
    """

    call_id: str
    session_id: str
    agent_id: str
    parent_agent: str | None
    seq: int
    endpoint: str  # chat | completions
    backend: str
    model: str
    parent_call_id: str | None
    shared_prefix_len: int
    kind: str
    reuse: str
    prompt_ids: IdArray
    sampled_ids: IdArray
    sampled_logprobs: FloatArray
    finish_reason: dict[str, Any]
    sampling_params: dict[str, Any]
    weight_version: str
    timings: dict[str, float]
    request: dict[str, Any]  # messages, tools, ... as the harness sent them (text, for people)
    response: dict[str, Any]  # the choice as returned (text, for people)
    created_at: float
    # What the gateway needs to rebuild its token tree after a restart.
    prompt_key: str = ""
    reply_key: str = ""
    render_len: int = 0
    render_digest: str = ""
    turns_before: int = 0
    # The call's span when tracing was on (W3C hex ids; "" when off, or in a store older than them).
    trace_id: str = ""
    span_id: str = ""
    adapter: str = ""
    """The LoRA adapter the engine sampled with (its loaded name); "": the base model."""
    engine: str = ""
    """The base URL of the engine that sampled the call (the gateway's router chose it); "": a
    pass-through call, or a store older than schema 5."""
    images: list[ImageSpan] = field(default_factory=list)
    """The images the prompt carried, in token order (their bytes: the store's `images` table)."""
    routed_experts: bytes = b""
    """A mixture-of-experts call's routed experts (R3), recorded with the gateway's record_routing:
    `roost.rollout.store.routing_blob`'s packing of [path_len - 1, layers x top_k] ids, row i the
    token at path position i (the last sampled token never ran through the model); b"": not recorded."""

    @property
    def path_len(self) -> int:
        return len(self.prompt_ids) + len(self.sampled_ids)

    @property
    def untrainable(self) -> str | None:
        """Why this call's tokens cannot be trained on; None when they can. Only a pass-through
        call (`backend` openai) lacks what training needs: its upstream returned no token ids
        (`kind` text), or not one logprob per sampled id (then none is stored, never a stand-in)."""
        if len(self.prompt_ids) == 0:
            return f"the {self.backend} upstream returned no token ids"
        if len(self.sampled_logprobs) != len(self.sampled_ids):
            return f"the {self.backend} upstream returned no logprob for each sampled token"
        return None


@dataclass
class RewardRecord:
    """A reward for a whole session (agent and call None), one agent, or one call."""

    session_id: str
    reward: float
    agent_id: str | None = None
    call_id: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0


@dataclass
class AdvantageRecord:
    """An advantage posted for one call: a scalar for all its sampled tokens, or one per token."""

    call_id: str
    session_id: str
    value: float | None = None
    per_token: list[float] | None = None
    created_at: float = 0.0
