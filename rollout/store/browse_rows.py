"""What a paged look over a store returns (`browse.StoreBrowser`): lists without token blobs, one
call's record and a window of its tokens."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Page:
    """Rows `offset .. offset+limit` of a list (a page with `limit` rows may have more after it)."""

    offset: int = 0
    limit: int = 50


@dataclass
class StepRow:
    version: str
    sessions: int


@dataclass
class GroupRow:
    group_id: str
    sessions: int
    finished: int
    mean_return: float | None


@dataclass
class SessionRow:
    session_id: str
    group_id: str | None
    status: str
    task: dict[str, Any]
    finish_info: dict[str, Any]
    outcome: str
    """The episode's outcome status (`ok`, `timeout`, ...); empty while the session is open."""
    calls: int
    ret: float | None
    advantage: float | None


@dataclass
class CallRow:
    call_id: str
    session_id: str
    agent_id: str
    parent_agent: str | None
    seq: int
    parent_call_id: str | None
    shared_prefix_len: int
    kind: str
    prompt_len: int
    sampled_len: int
    weight_version: str
    finish_reason: dict[str, Any]
    reply: str
    advantage: float | None = None
    reward: float | None = None


@dataclass
class CallDetail:
    row: CallRow
    model: str
    request: dict[str, Any]
    response: dict[str, Any]
    timings: dict[str, Any]
    trace: dict[str, str] = field(default_factory=dict)
    per_token_advantage: list[float] | None = None
    adapter: str = ""
    """The LoRA adapter that sampled the call ("": the base model)."""


@dataclass(frozen=True)
class CallTiming:
    """One call's recorded timings and when it was recorded: what `program_times` sums."""

    call_id: str
    created_at: float
    timings: dict[str, Any]


@dataclass
class TokenWindow:
    """Tokens `start .. start+len(ids)` of a call's path; logprobs are None on prompt tokens."""

    start: int
    ids: list[int]
    logprobs: list[float | None]
    prompt_len: int
    total: int


def reply_text(response: dict[str, Any]) -> str:
    """The text a recorded reply showed the harness: content, else its tool calls' names."""
    message = response.get("message") or {}
    text = message.get("content") or response.get("text") or ""
    calls = message.get("tool_calls") or []
    names = ", ".join(str((c.get("function") or {}).get("name")) for c in calls if isinstance(c, dict))
    return (str(text) + (f" [tool calls: {names}]" if names else "")).strip()
