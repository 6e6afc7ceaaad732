"""Opening a trajectory store for the viewer: read-only, and checked against the schema it reads.

A store written by another roost (an older schema without some columns, a newer one) or a file
that is not a store at all gives `StoreUnreadable` with what is wrong and what to do; the viewer
shows that message on its pages instead of failing a query halfway through one.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from roost.rollout.store import schema

# The columns the viewer's queries name; any other column a store has is left alone.
NEEDED = {
    "sessions": ("session_id", "group_id", "task", "metadata", "status", "created_at", "finish_info"),
    "agents": ("session_id", "agent_id", "parent_agent", "created_at"),
    "calls": ("call_id", "session_id", "agent_id", "parent_agent", "seq", "model", "parent_call_id",
              "shared_prefix_len", "kind", "prompt_ids", "sampled_ids", "sampled_logprobs", "finish_reason",
              "weight_version", "timings", "request", "response", "created_at"),
    "rewards": ("session_id", "agent_id", "call_id", "reward", "info"),
    "advantages": ("call_id", "session_id", "value", "per_token"),
}


class StoreUnreadable(RuntimeError):
    """The file cannot be read as a trajectory store of the schema this viewer knows."""


def connect(path: Path) -> sqlite3.Connection:
    """A read-only connection (the writer, if any, keeps writing: WAL gives a snapshot per read)."""
    if not path.is_file():
        raise StoreUnreadable(f"no trajectory store at {path}; a run folder holds trajectories.sqlite "
                              "once its gateway has started (pass --store FILE to open another)")
    try:
        return schema.connect(str(path), readonly=True)
    except sqlite3.Error as exc:
        raise StoreUnreadable(f"{path} cannot be opened as SQLite ({exc})") from exc


def check(conn: sqlite3.Connection, path: Path) -> dict[str, set[str]]:
    """The columns of each table; raises `StoreUnreadable` when a needed one is missing."""
    try:
        version = schema.stored_version(conn)
        columns = {t: {r[1] for r in conn.execute(f"PRAGMA table_info({t})")} for t in NEEDED}
    except sqlite3.DatabaseError as exc:
        raise StoreUnreadable(f"{path} is not a trajectory store ({exc})") from exc
    if version is not None and version > schema.SCHEMA_VERSION:
        raise StoreUnreadable(f"{path} has store schema version {version}; this viewer reads up to "
                              f"{schema.SCHEMA_VERSION}: view it with the roost that wrote it")
    missing = [_lacks(t, [c for c in cols if c not in columns[t]], bool(columns[t])) for t, cols in NEEDED.items()]
    if any(missing):
        raise StoreUnreadable(f"{path} is a trajectory store of an older schema (version {version or 'unknown'}): "
                              f"{'; '.join(m for m in missing if m)}; "
                              "export it with the roost that wrote it, or view a store this roost wrote")
    return columns


def _lacks(table: str, absent: list[str], exists: bool) -> str:
    if not exists:
        return f"it has no {table} table"
    return f"{table} lacks {', '.join(f'{table}.{c}' for c in absent)}" if absent else ""

