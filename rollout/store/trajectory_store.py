"""The gateway's handle on the trajectory store: async writes that commit before returning.

`await store.record_call(call)` returns once the call's row is committed (group commit on
the writer thread, see writer.py), so a response sent after it can never name a call the
store lacks, even if the gateway is killed the next instant.
"""

from __future__ import annotations

import asyncio
import sqlite3
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import orjson

from roost.outcome import EpisodeOutcome, SessionStatus
from roost.rollout.store import schema
from roost.rollout.store.reader import TrajectoryReader
from roost.rollout.store.records import (
    AdvantageRecord,
    AgentRecord,
    CallRecord,
    ImageRecord,
    RewardRecord,
    SessionRecord,
)
from roost.rollout.store.rows import (
    INSERT_CALL,
    INSERT_IMAGE,
    INSERT_SESSION,
    call_row,
    image_row,
    outcome_row,
    session_row,
)
from roost.rollout.store.schema import OUTCOME_COLUMNS
from roost.rollout.store.writer import GroupCommitWriter

T = TypeVar("T")


class TrajectoryStore:
    """A store file opened for writing by one gateway process."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._writer: GroupCommitWriter | None = None

    def open(self) -> TrajectoryStore:
        self.path.parent.mkdir(parents=True, exist_ok=True)

        def connect() -> sqlite3.Connection:
            conn = schema.connect(str(self.path))
            schema.create(conn)
            return conn

        self._writer = GroupCommitWriter(connect)
        self._writer.start()
        return self

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    @property
    def writer(self) -> GroupCommitWriter:
        if self._writer is None:
            raise RuntimeError("TrajectoryStore.open() was not called")
        return self._writer

    async def _write(self, op: Callable[[sqlite3.Connection], T]) -> T:
        value: T = await self.writer.submit(op)
        return value

    async def record_call(self, call: CallRecord, images: Sequence[ImageRecord] = ()) -> None:
        """The call, and the bytes of each image it carried that the store lacks, in one
        transaction: an image is stored once however many calls carry it, and a call is never
        stored without its images."""
        row = call_row(call)
        image_rows = [image_row(image, call.created_at) for image in images]

        def write(conn: sqlite3.Connection) -> None:
            if image_rows:
                conn.executemany(INSERT_IMAGE, image_rows)
            conn.execute(INSERT_CALL, row)

        await self._write(write)

    async def create_session(self, session: SessionRecord) -> None:
        row = session_row(session)
        await self._write(lambda conn: conn.execute(INSERT_SESSION, row))

    async def add_agent(self, agent: AgentRecord) -> None:
        row = (agent.session_id, agent.agent_id, agent.parent_agent, agent.created_at)
        await self._write(
            lambda conn: conn.execute(
                "INSERT OR IGNORE INTO agents(session_id, agent_id, parent_agent, created_at) VALUES (?,?,?,?)", row
            )
        )

    async def add_reward(self, reward: RewardRecord) -> None:
        row = (
            reward.session_id,
            reward.agent_id,
            reward.call_id,
            reward.reward,
            orjson.dumps(reward.info).decode(),
            reward.created_at,
        )
        await self._write(
            lambda conn: conn.execute(
                "INSERT INTO rewards(session_id, agent_id, call_id, reward, info, created_at) VALUES (?,?,?,?,?,?)", row
            )
        )

    async def set_advantages(self, advantages: list[AdvantageRecord]) -> None:
        rows = [
            (
                a.call_id,
                a.session_id,
                a.value,
                array("d", a.per_token).tobytes() if a.per_token is not None else None,
                a.created_at,
            )
            for a in advantages
        ]
        await self._write(
            lambda conn: conn.executemany(
                "INSERT OR REPLACE INTO advantages(call_id, session_id, value, per_token, created_at) "
                "VALUES (?,?,?,?,?)",
                rows,
            )
        )

    async def finish_session(
        self, session_id: str, finished_at: float, outcome: EpisodeOutcome, info: dict[str, Any]
    ) -> None:
        payload = orjson.dumps(info).decode()
        outcome_sets = ", ".join(f"{c}=?" for c in OUTCOME_COLUMNS)
        await self._write(
            lambda conn: conn.execute(
                f"UPDATE sessions SET status=?, finished_at=?, finish_info=?, {outcome_sets} WHERE session_id=?",
                (SessionStatus.FINISHED.value, finished_at, payload, *outcome_row(outcome), session_id),
            )
        )

    async def read(self, fn: Callable[[TrajectoryReader], T]) -> T:
        """Run `fn(reader)` on a worker thread with a fresh read-only snapshot."""

        def run() -> T:
            with TrajectoryReader(self.path) as reader:
                return fn(reader)

        return await asyncio.to_thread(run)
