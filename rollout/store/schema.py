"""The store's SQLite schema and the pragmas every connection uses.

Token ids are stored as little-endian int32 blobs and logprobs as little-endian float64
blobs (`array('i')` / `array('d')` bytes on the little-endian machines roost runs on).
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable

SCHEMA_VERSION = 7
OUTCOME_COLUMNS = ("outcome_status", "outcome_reward", "outcome_reward_source", "outcome_kind", "outcome_reason")
"""A finished session's `EpisodeOutcome`, one column a field (NULL while the session is open)."""


def _backfill_outcomes(conn: sqlite3.Connection) -> None:
    """Sessions finished before the outcome had columns carried it in their free finish info."""
    from roost.rollout.store.rows import outcome_from_legacy, outcome_row

    finished = conn.execute("SELECT session_id, group_id, finish_info FROM sessions WHERE status='finished'").fetchall()
    conn.executemany(
        f"UPDATE sessions SET {', '.join(c + '=?' for c in OUTCOME_COLUMNS)} WHERE session_id=?",
        [(*outcome_row(outcome_from_legacy(group, info)), sid) for sid, group, info in finished],
    )


# What each version adds to the one before; `create` applies the missing steps to an older store.
MIGRATIONS: dict[int, tuple[str | Callable[[sqlite3.Connection], None], ...]] = {
    2: (
        "ALTER TABLE calls ADD COLUMN trace_id TEXT NOT NULL DEFAULT ''",  # the call's span (tracing)
        "ALTER TABLE calls ADD COLUMN span_id TEXT NOT NULL DEFAULT ''",
    ),
    3: (
        *(
            f"ALTER TABLE sessions ADD COLUMN {c} {'REAL' if c == 'outcome_reward' else 'TEXT'}"
            for c in OUTCOME_COLUMNS
        ),
        _backfill_outcomes,
    ),
    4: ("ALTER TABLE calls ADD COLUMN adapter TEXT NOT NULL DEFAULT ''",),  # the LoRA adapter; '': the base
    5: ("ALTER TABLE calls ADD COLUMN engine TEXT NOT NULL DEFAULT ''",),  # the engine's URL; '': not recorded
    # the images a call carried ([[sha256, offset, count], ...]); their bytes in `images`, created by DDL
    6: ("ALTER TABLE calls ADD COLUMN images TEXT NOT NULL DEFAULT '[]'",),
    7: ("ALTER TABLE calls ADD COLUMN routed_experts BLOB NOT NULL DEFAULT x''",),  # R3; x'': not recorded
}

if sys.byteorder != "little":  # blobs are written in native order; say so instead of corrupting
    raise ImportError("roost's trajectory store assumes a little-endian machine")

DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    key_hash TEXT NOT NULL,
    group_id TEXT,
    task TEXT NOT NULL,
    metadata TEXT NOT NULL,
    reasoning_policy TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    finished_at REAL,
    finish_info TEXT NOT NULL,
    outcome_status TEXT,
    outcome_reward REAL,
    outcome_reward_source TEXT,
    outcome_kind TEXT,
    outcome_reason TEXT
);
CREATE INDEX IF NOT EXISTS sessions_by_group ON sessions(group_id);
CREATE INDEX IF NOT EXISTS sessions_by_key ON sessions(key_hash);
CREATE TABLE IF NOT EXISTS agents (
    session_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    parent_agent TEXT,
    created_at REAL NOT NULL,
    PRIMARY KEY (session_id, agent_id)
);
CREATE TABLE IF NOT EXISTS calls (
    call_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    parent_agent TEXT,
    seq INTEGER NOT NULL,
    endpoint TEXT NOT NULL,
    backend TEXT NOT NULL,
    model TEXT NOT NULL,
    parent_call_id TEXT,
    shared_prefix_len INTEGER NOT NULL,
    kind TEXT NOT NULL,
    reuse TEXT NOT NULL,
    prompt_ids BLOB NOT NULL,
    sampled_ids BLOB NOT NULL,
    sampled_logprobs BLOB NOT NULL,
    finish_reason TEXT NOT NULL,
    sampling_params TEXT NOT NULL,
    weight_version TEXT NOT NULL,
    timings TEXT NOT NULL,
    request TEXT NOT NULL,
    response TEXT NOT NULL,
    created_at REAL NOT NULL,
    prompt_key TEXT NOT NULL,
    reply_key TEXT NOT NULL,
    render_len INTEGER NOT NULL,
    render_digest TEXT NOT NULL,
    turns_before INTEGER NOT NULL,
    trace_id TEXT NOT NULL DEFAULT '',
    span_id TEXT NOT NULL DEFAULT '',
    adapter TEXT NOT NULL DEFAULT '',
    engine TEXT NOT NULL DEFAULT '',
    images TEXT NOT NULL DEFAULT '[]',
    routed_experts BLOB NOT NULL DEFAULT x''
);
CREATE INDEX IF NOT EXISTS calls_by_session ON calls(session_id, seq);
CREATE TABLE IF NOT EXISTS rewards (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    agent_id TEXT,
    call_id TEXT,
    reward REAL NOT NULL,
    info TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS rewards_by_session ON rewards(session_id);
CREATE TABLE IF NOT EXISTS advantages (
    call_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    value REAL,
    per_token BLOB,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS advantages_by_session ON advantages(session_id);
-- Each image once, however many calls carried it (content-addressed).
CREATE TABLE IF NOT EXISTS images (
    sha256 TEXT PRIMARY KEY,
    media_type TEXT NOT NULL,
    data BLOB NOT NULL,
    width INTEGER NOT NULL,
    height INTEGER NOT NULL,
    created_at REAL NOT NULL
);
-- The viewer's steps: the sessions each weight version played, from the index alone.
CREATE INDEX IF NOT EXISTS calls_by_version ON calls(weight_version, session_id);
"""


def connect(path: str, *, readonly: bool = False) -> sqlite3.Connection:
    """Open the store. WAL lets readers run while the writer commits; synchronous=NORMAL
    makes a commit durable once it is in the WAL file, which survives the gateway process
    being killed (SIGKILL) though not a power cut: the trade we want for rollouts."""
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
    else:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout=10000")
    if not readonly:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def create(conn: sqlite3.Connection) -> None:
    """Create the tables, or bring a store of an older version up to this one (older roosts
    cannot write to it afterwards; they can still read it)."""
    version = stored_version(conn) or SCHEMA_VERSION
    if version > SCHEMA_VERSION:
        raise RuntimeError(
            f"trajectory store has schema version {version}, this roost reads up to version {SCHEMA_VERSION}; "
            "export it with the roost that wrote it, or point the gateway at a new --store file"
        )
    if version < SCHEMA_VERSION:
        _migrate(conn, version)
    conn.executescript(DDL)
    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))


def stored_version(conn: sqlite3.Connection) -> int | None:
    """The schema version a store says it has; None for a new file (or one that says nothing)."""
    if not has_table(conn, "meta"):
        return None
    row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    return int(row[0]) if row and str(row[0]).isdigit() else None


def _migrate(conn: sqlite3.Connection, version: int) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        for step in range(version + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[step]:
                statement(conn) if callable(statement) else conn.execute(statement)
        conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def select_columns(conn: sqlite3.Connection, table: str, wanted: tuple[str, ...], default: str = "''") -> str:
    """`wanted` as a SELECT list over this store's `table`: a column an older store lacks (one a
    reader opened without migrating it) reads as `default`."""
    present = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
    return ", ".join(c if c in present else f"{default} AS {c}" for c in wanted)


def has_table(conn: sqlite3.Connection, table: str) -> bool:
    """Whether this store has `table` (an older one a reader opened without migrating may not)."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone() is not None
