"""The viewer's read-only queries over a trajectory store, one page at a time.

Every list is paginated (`Page`), and no query loads token blobs except `call_tokens` in
`call_query`, which reads a window of them: a store of 100,000 calls pages as fast as a
store of ten. Steps are weight versions: a group belongs to the step(s) whose weights played
its calls (the `calls_by_version` index makes that a covering-index scan).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from roost.rollout.store import schema

from .store_open import check, connect


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


CALL_ROW_SQL = ("SELECT call_id, session_id, agent_id, parent_agent, seq, parent_call_id, shared_prefix_len, kind, "
                "length(prompt_ids)/4, length(sampled_ids)/4, weight_version, finish_reason, response FROM calls")


def _session_columns(conn: sqlite3.Connection) -> str:
    return schema.select_columns(conn, "sessions", ("session_id", "group_id", "status", "task", "finish_info",
                                                    "outcome_status"), default="NULL")


class StoreQueries:
    """Read-only queries over one store file; each opens its own snapshot (safe from any thread)."""

    def __init__(self, path: Path):
        self.path = path
        with self.connection() as conn:
            self.columns = check(conn, path)

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        conn = connect(self.path)
        try:
            yield conn
        finally:
            conn.close()

    def steps(self) -> list[StepRow]:
        with self.connection() as conn:
            rows = conn.execute("SELECT weight_version, COUNT(DISTINCT session_id) FROM calls GROUP BY weight_version")
            steps = [StepRow(v, n) for v, n in rows]
        return sorted(steps, key=lambda s: (not s.version.isdigit(), int(s.version) if s.version.isdigit() else 0,
                                            s.version))

    def groups(self, page: Page, *, version: str | None = None, prefix: str | None = None) -> list[GroupRow]:
        """Groups in order of their first session, filtered by step (weight version) or id prefix."""
        where, args = _group_filter(version, prefix)
        with self.connection() as conn:
            rows = conn.execute(
                f"SELECT group_id, COUNT(*), SUM(status='finished') FROM sessions WHERE group_id IS NOT NULL {where} "
                "GROUP BY group_id ORDER BY MIN(created_at), group_id LIMIT ? OFFSET ?",
                (*args, page.limit, page.offset)).fetchall()
            returns = _group_returns(conn, [r[0] for r in rows])
        return [GroupRow(g, n, done or 0, returns.get(g)) for g, n, done in rows]

    def sessions(self, page: Page, *, group_id: str | None = None) -> list[SessionRow]:
        where, args = ("WHERE group_id=?", (group_id,)) if group_id is not None else ("", ())
        with self.connection() as conn:
            rows = conn.execute(f"SELECT {_session_columns(conn)} FROM sessions {where} "
                                "ORDER BY created_at, session_id LIMIT ? OFFSET ?",
                                (*args, page.limit, page.offset)).fetchall()
            return [self._session_row(conn, r) for r in rows]

    def session(self, session_id: str) -> SessionRow | None:
        with self.connection() as conn:
            row = conn.execute(f"SELECT {_session_columns(conn)} FROM sessions WHERE session_id=?",
                               (session_id,)).fetchone()
            return self._session_row(conn, row) if row else None

    def _session_row(self, conn: sqlite3.Connection, row: tuple) -> SessionRow:
        sid = row[0]
        calls = conn.execute("SELECT COUNT(*) FROM calls WHERE session_id=?", (sid,)).fetchone()[0]
        ret = conn.execute("SELECT SUM(reward) FROM rewards WHERE session_id=?", (sid,)).fetchone()[0]
        adv = conn.execute("SELECT AVG(value) FROM advantages WHERE session_id=?", (sid,)).fetchone()[0]
        finish_info = orjson.loads(row[4])
        # a store written before outcomes had columns kept the status in the finish info
        outcome = row[5] or (finish_info.get("status", "ok") if row[2] == "finished" else "")
        return SessionRow(sid, row[1], row[2], orjson.loads(row[3]), finish_info, outcome, calls, ret, adv)

    def agents(self, session_id: str) -> list[tuple[str, str | None]]:
        with self.connection() as conn:
            return conn.execute("SELECT agent_id, parent_agent FROM agents WHERE session_id=? ORDER BY created_at",
                                (session_id,)).fetchall()

    def calls(self, session_id: str, page: Page) -> list[CallRow]:
        with self.connection() as conn:
            rows = conn.execute(f"{CALL_ROW_SQL} WHERE session_id=? ORDER BY seq LIMIT ? OFFSET ?",
                                (session_id, page.limit, page.offset)).fetchall()
            calls = [call_row(r) for r in rows]
            _attach_scores(conn, session_id, calls)
        return calls

    def rewards(self, session_id: str) -> list[tuple[str | None, str | None, float, dict[str, Any]]]:
        """(agent, call, reward, info) in the order they were posted: per-turn rewards name a call."""
        with self.connection() as conn:
            rows = conn.execute("SELECT agent_id, call_id, reward, info FROM rewards WHERE session_id=? ORDER BY id "
                                "LIMIT 1000", (session_id,)).fetchall()
        return [(a, c, r, orjson.loads(i)) for a, c, r, i in rows]


def call_row(row: tuple) -> CallRow:
    response = orjson.loads(row[12])
    return CallRow(*row[:11], finish_reason=orjson.loads(row[11]), reply=reply_text(response))


def reply_text(response: dict[str, Any]) -> str:
    """The text a reply showed the harness: content, else its tool calls' names."""
    message = response.get("message") or {}
    text = message.get("content") or response.get("text") or ""
    calls = message.get("tool_calls") or []
    names = ", ".join(str((c.get("function") or {}).get("name")) for c in calls if isinstance(c, dict))
    return (str(text) + (f" [tool calls: {names}]" if names else "")).strip()


def _group_filter(version: str | None, prefix: str | None) -> tuple[str, tuple]:
    where, args = "", ()
    if version is not None:
        where += " AND session_id IN (SELECT session_id FROM calls WHERE weight_version=?)"
        args += (version,)
    if prefix:
        # A range instead of LIKE: it uses the group index and treats % and _ as plain characters.
        where += " AND group_id >= ? AND group_id < ?"
        args += (prefix, prefix + "\U0010ffff")
    return where, args


def _group_returns(conn: sqlite3.Connection, group_ids: list[str]) -> dict[str, float]:
    if not group_ids:
        return {}
    marks = ",".join("?" * len(group_ids))
    rows = conn.execute(
        f"SELECT s.group_id, SUM(r.reward) FROM sessions s JOIN rewards r ON r.session_id = s.session_id "
        f"WHERE s.group_id IN ({marks}) GROUP BY s.group_id", group_ids).fetchall()
    sizes = dict(conn.execute(f"SELECT group_id, COUNT(*) FROM sessions WHERE group_id IN ({marks}) GROUP BY group_id",
                              group_ids).fetchall())
    return {g: total / sizes[g] for g, total in rows}


def _attach_scores(conn: sqlite3.Connection, session_id: str, calls: list[CallRow]) -> None:
    by_id = {c.call_id: c for c in calls}
    for call_id, value in conn.execute("SELECT call_id, value FROM advantages WHERE session_id=?", (session_id,)):
        if call_id in by_id:
            by_id[call_id].advantage = value
    for call_id, reward in conn.execute("SELECT call_id, SUM(reward) FROM rewards WHERE session_id=? AND "
                                        "call_id IS NOT NULL GROUP BY call_id", (session_id,)):
        if call_id in by_id:
            by_id[call_id].reward = reward
