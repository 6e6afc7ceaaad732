"""One call for the viewer: its record without the token blobs, and a window of its tokens.

The token path of a call is its prompt ids then its sampled ids; a window reads only its own
bytes of each blob (`substr` on 4-byte ids and 8-byte logprobs), so a call of a million tokens
costs what a page of it costs.
"""

from __future__ import annotations

import sqlite3
from array import array
from dataclasses import dataclass, field
from typing import Any

import orjson

from .queries import CALL_ROW_SQL, CallRow, StoreQueries, call_row

TRACE_COLUMNS = ("trace_id", "span_id")  # present in stores written with tracing on


@dataclass
class CallDetail:
    row: CallRow
    model: str
    request: dict[str, Any]
    response: dict[str, Any]
    timings: dict[str, Any]
    trace: dict[str, str] = field(default_factory=dict)
    per_token_advantage: list[float] | None = None


@dataclass
class TokenWindow:
    """Tokens `start .. start+len(ids)` of a call's path; logprobs are None on prompt tokens."""

    start: int
    ids: list[int]
    logprobs: list[float | None]
    prompt_len: int
    total: int


def call_detail(queries: StoreQueries, call_id: str) -> CallDetail | None:
    traced = [c for c in TRACE_COLUMNS if c in queries.columns["calls"]]
    columns = ", ".join(["model", "request", "timings", *traced])
    sql = CALL_ROW_SQL.replace(" FROM calls", f", {columns} FROM calls") + " WHERE call_id=?"
    with queries.connection() as conn:
        row = conn.execute(sql, (call_id,)).fetchone()
        if row is None:
            return None
        detail = CallDetail(call_row(row[:13]), row[13], orjson.loads(row[14]), orjson.loads(row[12]),
                            orjson.loads(row[15]), {c: v for c, v in zip(traced, row[16:]) if v})
        _scores(conn, detail)
    return detail


def _scores(conn: sqlite3.Connection, detail: CallDetail) -> None:
    adv = conn.execute("SELECT value, per_token FROM advantages WHERE call_id=?", (detail.row.call_id,)).fetchone()
    if adv is not None:
        detail.row.advantage = adv[0]
        detail.per_token_advantage = list(_floats(adv[1])) if adv[1] is not None else None
    reward = conn.execute("SELECT SUM(reward) FROM rewards WHERE call_id=?", (detail.row.call_id,)).fetchone()[0]
    detail.row.reward = reward


def call_tokens(queries: StoreQueries, call_id: str, start: int, limit: int) -> TokenWindow | None:
    """Tokens `start .. start+limit` of the call's path (prompt then sampled)."""
    with queries.connection() as conn:
        lens = conn.execute("SELECT length(prompt_ids)/4, length(sampled_ids)/4 FROM calls WHERE call_id=?",
                            (call_id,)).fetchone()
        if lens is None:
            return None
        prompt_len, sampled_len = lens
        end = min(start + limit, prompt_len + sampled_len)
        ids: list[int] = []
        logprobs: list[float | None] = []
        if start < prompt_len:
            ids += _ids(_slice(conn, "prompt_ids", call_id, start, min(end, prompt_len) - start, 4))
            logprobs += [None] * len(ids)
        s0, s1 = max(start, prompt_len) - prompt_len, end - prompt_len
        if s1 > s0:
            sampled = _ids(_slice(conn, "sampled_ids", call_id, s0, s1 - s0, 4))
            found = list(_floats(_slice(conn, "sampled_logprobs", call_id, s0, s1 - s0, 8)))
            # a pass-through upstream may return ids without logprobs: the tokens still show
            ids += sampled
            logprobs += found + [None] * (len(sampled) - len(found))
    return TokenWindow(start, ids, logprobs, prompt_len, prompt_len + sampled_len)


def _slice(conn: sqlite3.Connection, column: str, call_id: str, first: int, count: int, width: int) -> bytes:
    # substr counts from 1 and, on a blob, in bytes.
    row = conn.execute(f"SELECT substr({column}, ?, ?) FROM calls WHERE call_id=?",
                       (first * width + 1, count * width, call_id)).fetchone()
    return bytes(row[0]) if row and row[0] is not None else b""


def _ids(blob: bytes) -> list[int]:
    values = array("i")
    values.frombytes(blob)
    return values.tolist()


def _floats(blob: bytes) -> list[float]:
    values = array("d")
    values.frombytes(blob[: len(blob) // 8 * 8])
    return values.tolist()
