"""Synchronous reads of a trajectory store, for the trainer, exports, the control plane and the
viewer (`browse` adds its paged lists).

Readers never block the gateway's writer: WAL gives each read a consistent snapshot. A reader
checks the file when it opens it (`readable`): a file that is not a store, or a store of a schema
this roost does not read, raises `StoreUnreadable` saying what to do.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from roost.outcome import SessionStatus
from roost.rollout.store import readable, schema
from roost.rollout.store.readable import StoreUnreadable
from roost.rollout.store.records import (
    AdvantageRecord,
    AgentRecord,
    CallRecord,
    ImageRecord,
    RewardRecord,
    SessionRecord,
)
from roost.rollout.store.rows import (
    CALL_COLUMNS,
    SESSION_COLUMNS,
    advantage_from_row,
    agent_from_row,
    call_from_row,
    image_from_row,
    reward_from_row,
    session_from_row,
)


class StoreMissing(StoreUnreadable, FileNotFoundError):
    """The trajectory store file does not exist."""


class TrajectoryReader:
    """Read-only access to a store file; a context manager."""

    def __init__(self, path: str | Path):
        path = Path(path)
        if not path.is_file():
            raise StoreMissing(
                f"no trajectory store at {path}; pass the --store file the gateway wrote "
                "(default .roost/trajectories.sqlite in the gateway's working folder; a run folder holds "
                "trajectories.sqlite once its gateway has started)"
            )
        self.path = path
        try:
            self._conn: sqlite3.Connection = schema.connect(str(path), readonly=True)
        except sqlite3.Error as exc:
            raise StoreUnreadable(f"{path} cannot be opened as SQLite ({exc})") from exc
        try:
            readable.check(self._conn, path)
        except StoreUnreadable:
            self._conn.close()
            raise
        # an older store (a reader does not migrate it): its columns as it has them
        self._calls = schema.select_columns(self._conn, "calls", CALL_COLUMNS)
        self._sessions = schema.select_columns(self._conn, "sessions", SESSION_COLUMNS, default="NULL")
        self._has_images = schema.has_table(self._conn, "images")

    def __enter__(self) -> TrajectoryReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._conn.close()

    def session(self, session_id: str) -> SessionRecord | None:
        row = self._conn.execute(f"SELECT {self._sessions} FROM sessions WHERE session_id=?", (session_id,)).fetchone()
        return session_from_row(row) if row else None

    def session_by_key(self, key_hash: str) -> SessionRecord | None:
        row = self._conn.execute(f"SELECT {self._sessions} FROM sessions WHERE key_hash=?", (key_hash,)).fetchone()
        return session_from_row(row) if row else None

    def sessions(self, *, group_id: str | None = None, status: str | None = None) -> list[SessionRecord]:
        query = f"SELECT {self._sessions} FROM sessions"
        clauses, args = [], []
        if group_id is not None:
            clauses.append("group_id=?")
            args.append(group_id)
        if status is not None:
            clauses.append("status=?")
            args.append(SessionStatus(status).value)
        if clauses:
            query += " WHERE " + " AND ".join(clauses)
        query += " ORDER BY created_at, session_id"  # session_id: a fixed order for equal times
        return [session_from_row(r) for r in self._conn.execute(query, args)]

    def group_sessions_after(self, group_id: str, after: tuple[float, str] | None, limit: int) -> list[SessionRecord]:
        """Up to `limit` sessions of the group that come after `after` (created_at, session_id) in
        `sessions`' order: a page that stays the same however often it is asked for again."""
        query = f"SELECT {self._sessions} FROM sessions WHERE group_id=?"
        args: list[object] = [group_id]
        if after is not None:
            query += " AND (created_at > ? OR (created_at = ? AND session_id > ?))"
            args += [after[0], after[0], after[1]]
        query += " ORDER BY created_at, session_id LIMIT ?"
        return [session_from_row(r) for r in self._conn.execute(query, [*args, limit])]

    def agents(self, session_id: str) -> list[AgentRecord]:
        rows = self._conn.execute(
            "SELECT session_id, agent_id, parent_agent, created_at FROM agents WHERE session_id=? ORDER BY created_at",
            (session_id,),
        )
        return [agent_from_row(r) for r in rows]

    def calls(self, session_id: str) -> list[CallRecord]:
        rows = self._conn.execute(f"SELECT {self._calls} FROM calls WHERE session_id=? ORDER BY seq", (session_id,))
        return [call_from_row(r) for r in rows]

    def call(self, call_id: str) -> CallRecord | None:
        row = self._conn.execute(f"SELECT {self._calls} FROM calls WHERE call_id=?", (call_id,)).fetchone()
        return call_from_row(row) if row else None

    def image(self, sha256: str) -> ImageRecord | None:
        """An image's bytes by content address (None: not in this store, or a store before schema 6)."""
        if not self._has_images:
            return None
        row = self._conn.execute(
            "SELECT sha256, media_type, data, width, height FROM images WHERE sha256=?", (sha256,)
        ).fetchone()
        return image_from_row(row) if row else None

    def image_count(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM images").fetchone()[0]) if self._has_images else 0

    def call_count(self, session_id: str | None = None) -> int:
        if session_id is None:
            return int(self._conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0])
        return int(self._conn.execute("SELECT COUNT(*) FROM calls WHERE session_id=?", (session_id,)).fetchone()[0])

    def rewards(self, session_id: str, limit: int = -1) -> list[RewardRecord]:
        """The session's rewards in the order they were posted (the first `limit`; -1: all)."""
        rows = self._conn.execute(
            "SELECT session_id, agent_id, call_id, reward, info, created_at FROM rewards "
            "WHERE session_id=? ORDER BY id LIMIT ?",
            (session_id, limit),
        )
        return [reward_from_row(r) for r in rows]

    def advantages(self, session_id: str) -> dict[str, AdvantageRecord]:
        rows = self._conn.execute(
            "SELECT call_id, session_id, value, per_token, created_at FROM advantages WHERE session_id=?",
            (session_id,),
        )
        return {r[0]: advantage_from_row(r) for r in rows}
