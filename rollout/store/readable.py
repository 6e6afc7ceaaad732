"""Whether a file can be read as a trajectory store, checked once when a reader opens it.

A store written by another roost (an older schema without some columns, a newer one) or a file
that is not a store at all gives `StoreUnreadable` with what is wrong and what to do, instead of a
query failing halfway through a read. Columns that later schema versions added (trace ids, the
outcome, the images) are not needed: a reader reads them as defaults in an older store it leaves as it is.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from roost.rollout.store import schema
from roost.rollout.store.rows import CALL_COLUMNS, SESSION_COLUMNS

ADDED_LATER = {
    "calls": ("trace_id", "span_id", "adapter", "engine", "images", "routed_experts"),
    "sessions": schema.OUTCOME_COLUMNS,
}
NEEDED = {
    "sessions": tuple(c for c in SESSION_COLUMNS if c not in ADDED_LATER["sessions"]),
    "agents": ("session_id", "agent_id", "parent_agent", "created_at"),
    "calls": tuple(c for c in CALL_COLUMNS if c not in ADDED_LATER["calls"]),
    "rewards": ("session_id", "agent_id", "call_id", "reward", "info", "created_at"),
    "advantages": ("call_id", "session_id", "value", "per_token", "created_at"),
}
"""The columns of schema version 1, the oldest this roost reads; any other column is left alone."""


class StoreUnreadable(RuntimeError):
    """The file cannot be read as a trajectory store of a schema this roost knows."""


def check(conn: sqlite3.Connection, path: Path) -> None:
    """Raise `StoreUnreadable` unless `conn` holds a store of a schema this roost reads."""
    try:
        version = schema.stored_version(conn)
        columns = {t: {r[1] for r in conn.execute(f"PRAGMA table_info({t})")} for t in NEEDED}
    except sqlite3.DatabaseError as exc:
        raise StoreUnreadable(f"{path} is not a trajectory store ({exc})") from exc
    if version is not None and version > schema.SCHEMA_VERSION:
        raise StoreUnreadable(
            f"{path} has store schema version {version}; this roost reads up to "
            f"{schema.SCHEMA_VERSION}: read it with the roost that wrote it"
        )
    missing = [_lacks(t, [c for c in cols if c not in columns[t]], bool(columns[t])) for t, cols in NEEDED.items()]
    if any(missing):
        raise StoreUnreadable(
            f"{path} is a trajectory store of an older schema (version {version or 'unknown'}): "
            f"{'; '.join(m for m in missing if m)}; "
            "export it with the roost that wrote it, or read a store this roost wrote"
        )


def _lacks(table: str, absent: list[str], exists: bool) -> str:
    if not exists:
        return f"it has no {table} table"
    return f"{table} lacks {', '.join(f'{table}.{c}' for c in absent)}" if absent else ""
