"""Records to SQLite rows and back."""

from __future__ import annotations

import sqlite3
from array import array
from typing import Any

import orjson

from roost.outcome import EpisodeKind, EpisodeOutcome, EpisodeStatus, RewardSource, SessionStatus
from roost.rollout.store.records import (
    AdvantageRecord,
    AgentRecord,
    CallRecord,
    FloatArray,
    IdArray,
    ImageRecord,
    ImageSpan,
    RewardRecord,
    SessionRecord,
)
from roost.rollout.store.schema import OUTCOME_COLUMNS

CALL_COLUMNS = (
    "call_id",
    "session_id",
    "agent_id",
    "parent_agent",
    "seq",
    "endpoint",
    "backend",
    "model",
    "parent_call_id",
    "shared_prefix_len",
    "kind",
    "reuse",
    "prompt_ids",
    "sampled_ids",
    "sampled_logprobs",
    "finish_reason",
    "sampling_params",
    "weight_version",
    "timings",
    "request",
    "response",
    "created_at",
    "prompt_key",
    "reply_key",
    "render_len",
    "render_digest",
    "turns_before",
    "trace_id",
    "span_id",
    "adapter",
    "engine",
    "images",
    "routed_experts",
)
SESSION_COLUMNS = (
    "session_id",
    "key_hash",
    "group_id",
    "task",
    "metadata",
    "reasoning_policy",
    "status",
    "created_at",
    "finished_at",
    "finish_info",
    *OUTCOME_COLUMNS,
)
INSERT_CALL = f"INSERT INTO calls ({', '.join(CALL_COLUMNS)}) VALUES ({', '.join('?' * len(CALL_COLUMNS))})"
INSERT_IMAGE = "INSERT OR IGNORE INTO images (sha256, media_type, data, width, height, created_at) VALUES (?,?,?,?,?,?)"
INSERT_SESSION = f"INSERT INTO sessions ({', '.join(SESSION_COLUMNS)}) VALUES ({', '.join('?' * len(SESSION_COLUMNS))})"


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def ids_from_blob(blob: bytes) -> IdArray:
    values = array("i")
    values.frombytes(blob)
    return values


def floats_from_blob(blob: bytes) -> FloatArray:
    values = array("d")
    values.frombytes(blob)
    return values


def call_row(c: CallRecord) -> tuple[Any, ...]:
    return (
        c.call_id,
        c.session_id,
        c.agent_id,
        c.parent_agent,
        c.seq,
        c.endpoint,
        c.backend,
        c.model,
        c.parent_call_id,
        c.shared_prefix_len,
        c.kind,
        c.reuse,
        c.prompt_ids.tobytes(),
        c.sampled_ids.tobytes(),
        c.sampled_logprobs.tobytes(),
        _json(c.finish_reason),
        _json(c.sampling_params),
        c.weight_version,
        _json(c.timings),
        _json(c.request),
        _json(c.response),
        c.created_at,
        c.prompt_key,
        c.reply_key,
        c.render_len,
        c.render_digest,
        c.turns_before,
        c.trace_id,
        c.span_id,
        c.adapter,
        c.engine,
        _json([[i.sha256, i.offset, i.count] for i in c.images]),
        c.routed_experts,
    )


def call_from_row(row: sqlite3.Row | tuple[Any, ...]) -> CallRecord:
    v = dict(zip(CALL_COLUMNS, row))
    for name in ("finish_reason", "sampling_params", "timings", "request", "response"):
        v[name] = orjson.loads(v[name])
    v["prompt_ids"] = ids_from_blob(v["prompt_ids"])
    v["sampled_ids"] = ids_from_blob(v["sampled_ids"])
    v["sampled_logprobs"] = floats_from_blob(v["sampled_logprobs"])
    v["images"] = [ImageSpan(*span) for span in orjson.loads(v["images"] or "[]")]  # '': a store before schema 6
    v["routed_experts"] = v["routed_experts"] or b""  # a store older than the column reads it as ''
    return CallRecord(**v)


def session_row(s: SessionRecord) -> tuple[Any, ...]:
    return (
        s.session_id,
        s.key_hash,
        s.group_id,
        _json(s.task),
        _json(s.metadata),
        s.reasoning_policy,
        s.status.value,
        s.created_at,
        s.finished_at,
        _json(s.finish_info),
        *outcome_row(s.outcome),
    )


def session_from_row(row: tuple[Any, ...]) -> SessionRecord:
    v = dict(zip(SESSION_COLUMNS, row))
    for name in ("task", "metadata", "finish_info"):
        v[name] = orjson.loads(v[name])
    columns = [v.pop(c) for c in OUTCOME_COLUMNS]
    v["status"] = SessionStatus(v["status"])
    if v["status"] is SessionStatus.FINISHED:
        # NULL columns: a store written before they existed, opened by a reader without migrating it
        v["outcome"] = (
            outcome_from_legacy(v["group_id"], v["finish_info"])
            if columns[0] is None
            else outcome_from_columns(*columns)
        )
    return SessionRecord(**v)


def outcome_row(o: EpisodeOutcome | None) -> tuple[Any, ...]:
    if o is None:
        return (None,) * len(OUTCOME_COLUMNS)
    return o.status.value, o.reward, o.reward_source.value, o.kind.value, o.reason


def outcome_from_columns(
    status: str, reward: float | None, source: str, kind: str, reason: str | None
) -> EpisodeOutcome:
    return EpisodeOutcome(
        status=EpisodeStatus(status),
        reward=reward,
        reward_source=RewardSource(source),
        kind=EpisodeKind(kind),
        reason=reason,
    )


# Before the outcome had a kind, the trainer told its eval and SFT groups by their ids' prefixes.
_LEGACY_KIND_PREFIXES = {"eval-": EpisodeKind.EVAL, "sft-": EpisodeKind.SFT}


def outcome_from_legacy(group_id: str | None, finish_info: str | dict[str, Any]) -> EpisodeOutcome:
    """The outcome of a session finished before outcomes were stored as columns."""
    info = orjson.loads(finish_info) if isinstance(finish_info, str) else finish_info
    kind = next(
        (k for prefix, k in _LEGACY_KIND_PREFIXES.items() if (group_id or "").startswith(prefix)), EpisodeKind.TRAIN
    )
    return EpisodeOutcome.from_info(info if isinstance(info, dict) else {}, kind=kind)


def agent_from_row(row: tuple[Any, ...]) -> AgentRecord:
    return AgentRecord(session_id=row[0], agent_id=row[1], parent_agent=row[2], created_at=row[3])


def reward_from_row(row: tuple[Any, ...]) -> RewardRecord:
    return RewardRecord(
        session_id=row[0],
        agent_id=row[1],
        call_id=row[2],
        reward=row[3],
        info=orjson.loads(row[4]),
        created_at=row[5],
    )


def advantage_from_row(row: tuple[Any, ...]) -> AdvantageRecord:
    per_token = list(floats_from_blob(row[3])) if row[3] is not None else None
    return AdvantageRecord(call_id=row[0], session_id=row[1], value=row[2], per_token=per_token, created_at=row[4])


def image_row(image: ImageRecord, created_at: float) -> tuple[Any, ...]:
    return image.sha256, image.media_type, image.data, image.width, image.height, created_at


def image_from_row(row: tuple[Any, ...]) -> ImageRecord:
    return ImageRecord(sha256=row[0], media_type=row[1], data=row[2], width=row[3], height=row[4])
