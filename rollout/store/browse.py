"""Paged and aggregate reads of a trajectory store, for people browsing it (`roost view`).

    with StoreBrowser(".roost/trajectories.sqlite") as store:
        store.groups(Page(0, 50), version="3"), store.call_tokens(call_id, start=0, limit=2000)

Every list is paginated (`Page`), and no query loads token blobs except `call_tokens`, which reads
a window of them (`substr` on 4-byte ids and 8-byte logprobs): a store of 100,000 calls pages as
fast as a store of ten, and a call of a million tokens costs what a page of it costs. Steps are
weight versions: a group belongs to the step(s) whose weights played its calls (the
`calls_by_version` index makes that a covering-index scan).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import orjson

from roost.rollout.store.browse_rows import (
    CallDetail,
    CallRow,
    CallTiming,
    GroupRow,
    Page,
    SessionRow,
    StepRow,
    TokenWindow,
    reply_text,
)
from roost.rollout.store.reader import TrajectoryReader
from roost.rollout.store.records import SessionRecord
from roost.rollout.store.rows import floats_from_blob, ids_from_blob, session_from_row

CALL_ROW_SQL = (
    "SELECT call_id, session_id, agent_id, parent_agent, seq, parent_call_id, shared_prefix_len, kind, "
    "length(prompt_ids)/4, length(sampled_ids)/4, weight_version, finish_reason, response"
)


class StoreBrowser(TrajectoryReader):
    """A reader with the lists a viewer pages through."""

    def steps(self) -> list[StepRow]:
        rows = self._conn.execute(
            "SELECT weight_version, COUNT(DISTINCT session_id) FROM calls GROUP BY weight_version"
        )
        steps = [StepRow(v, n) for v, n in rows]
        return sorted(
            steps, key=lambda s: (not s.version.isdigit(), int(s.version) if s.version.isdigit() else 0, s.version)
        )

    def groups(self, page: Page, *, version: str | None = None, prefix: str | None = None) -> list[GroupRow]:
        """Groups in order of their first session, filtered by step (weight version) or id prefix."""
        where, args = _group_filter(version, prefix)
        rows = self._conn.execute(
            f"SELECT group_id, COUNT(*), SUM(status='finished') FROM sessions WHERE group_id IS NOT NULL {where} "
            "GROUP BY group_id ORDER BY MIN(created_at), group_id LIMIT ? OFFSET ?",
            (*args, page.limit, page.offset),
        ).fetchall()
        returns = self._group_returns([r[0] for r in rows])
        return [GroupRow(g, n, done or 0, returns.get(g)) for g, n, done in rows]

    def session_rows(self, page: Page, *, group_id: str | None = None) -> list[SessionRow]:
        where, args = ("WHERE group_id=?", (group_id,)) if group_id is not None else ("", ())
        rows = self._conn.execute(
            f"SELECT {self._sessions} FROM sessions {where} ORDER BY created_at, session_id LIMIT ? OFFSET ?",
            (*args, page.limit, page.offset),
        ).fetchall()
        return [self._session_row(session_from_row(r)) for r in rows]

    def session_row(self, session_id: str) -> SessionRow | None:
        session = self.session(session_id)
        return self._session_row(session) if session is not None else None

    def _session_row(self, s: SessionRecord) -> SessionRow:
        ret = self._conn.execute("SELECT SUM(reward) FROM rewards WHERE session_id=?", (s.session_id,)).fetchone()[0]
        adv = self._conn.execute("SELECT AVG(value) FROM advantages WHERE session_id=?", (s.session_id,)).fetchone()[0]
        outcome = s.outcome.status.value if s.outcome is not None else ""
        return SessionRow(
            s.session_id,
            s.group_id,
            s.status.value,
            s.task,
            s.finish_info,
            outcome,
            self.call_count(s.session_id),
            ret,
            adv,
        )

    def call_rows(self, session_id: str, page: Page) -> list[CallRow]:
        rows = self._conn.execute(
            f"{CALL_ROW_SQL} FROM calls WHERE session_id=? ORDER BY seq LIMIT ? OFFSET ?",
            (session_id, page.limit, page.offset),
        ).fetchall()
        calls = [_call_row(r) for r in rows]
        self._attach_scores(session_id, calls)
        return calls

    def call_timings(self, session_id: str) -> list[CallTiming]:
        """Every call of the session, timings only (no page: a session's time is over all of them)."""
        rows = self._conn.execute(
            "SELECT call_id, created_at, timings FROM calls WHERE session_id=? ORDER BY seq", (session_id,)
        )
        return [CallTiming(c, t, orjson.loads(x)) for c, t, x in rows]

    def call_detail(self, call_id: str) -> CallDetail | None:
        """One call's record without its token blobs."""
        row = self._conn.execute(
            f"{CALL_ROW_SQL}, model, request, timings, trace_id, span_id, adapter FROM "
            f"(SELECT {self._calls} FROM calls WHERE call_id=?)",
            (call_id,),
        ).fetchone()
        if row is None:
            return None
        detail = CallDetail(
            _call_row(row[:13]),
            row[13],
            orjson.loads(row[14]),
            orjson.loads(row[12]),
            orjson.loads(row[15]),
            {c: v for c, v in zip(("trace_id", "span_id"), row[16:18]) if v},
            adapter=row[18],
        )
        adv = self._conn.execute("SELECT value, per_token FROM advantages WHERE call_id=?", (call_id,)).fetchone()
        if adv is not None:
            detail.row.advantage = adv[0]
            detail.per_token_advantage = floats_from_blob(adv[1]).tolist() if adv[1] is not None else None
        detail.row.reward = self._conn.execute(
            "SELECT SUM(reward) FROM rewards WHERE call_id=?", (call_id,)
        ).fetchone()[0]
        return detail

    def call_tokens(self, call_id: str, start: int, limit: int) -> TokenWindow | None:
        """Tokens `start .. start+limit` of the call's path (prompt then sampled)."""
        lens = self._conn.execute(
            "SELECT length(prompt_ids)/4, length(sampled_ids)/4 FROM calls WHERE call_id=?", (call_id,)
        ).fetchone()
        if lens is None:
            return None
        prompt_len, sampled_len = lens
        end = min(start + limit, prompt_len + sampled_len)
        ids: list[int] = []
        logprobs: list[float | None] = []
        if start < prompt_len:
            ids += ids_from_blob(self._slice("prompt_ids", call_id, start, min(end, prompt_len) - start, 4))
            logprobs += [None] * len(ids)
        s0, s1 = max(start, prompt_len) - prompt_len, end - prompt_len
        if s1 > s0:
            sampled = ids_from_blob(self._slice("sampled_ids", call_id, s0, s1 - s0, 4)).tolist()
            found: list[float | None] = [*floats_from_blob(self._slice("sampled_logprobs", call_id, s0, s1 - s0, 8))]
            # a pass-through upstream may return ids without logprobs: the tokens still show
            ids += sampled
            logprobs += found + [None] * (len(sampled) - len(found))
        return TokenWindow(start, ids, logprobs, prompt_len, prompt_len + sampled_len)

    def _slice(self, column: str, call_id: str, first: int, count: int, width: int) -> bytes:
        # substr counts from 1 and, on a blob, in bytes.
        row = self._conn.execute(
            f"SELECT substr({column}, ?, ?) FROM calls WHERE call_id=?", (first * width + 1, count * width, call_id)
        ).fetchone()
        return bytes(row[0]) if row and row[0] is not None else b""

    def _group_returns(self, group_ids: list[str]) -> dict[str, float]:
        if not group_ids:
            return {}
        marks = ",".join("?" * len(group_ids))
        rows = self._conn.execute(
            f"SELECT s.group_id, SUM(r.reward) FROM sessions s JOIN rewards r ON r.session_id = s.session_id "
            f"WHERE s.group_id IN ({marks}) GROUP BY s.group_id",
            group_ids,
        ).fetchall()
        sizes = dict(
            self._conn.execute(
                f"SELECT group_id, COUNT(*) FROM sessions WHERE group_id IN ({marks}) GROUP BY group_id", group_ids
            ).fetchall()
        )
        return {g: total / sizes[g] for g, total in rows}

    def _attach_scores(self, session_id: str, calls: list[CallRow]) -> None:
        by_id = {c.call_id: c for c in calls}
        for call_id, value in self._conn.execute(
            "SELECT call_id, value FROM advantages WHERE session_id=?", (session_id,)
        ):
            if call_id in by_id:
                by_id[call_id].advantage = value
        for call_id, reward in self._conn.execute(
            "SELECT call_id, SUM(reward) FROM rewards WHERE session_id=? AND call_id IS NOT NULL GROUP BY call_id",
            (session_id,),
        ):
            if call_id in by_id:
                by_id[call_id].reward = reward


_CALL_ROW_FIELDS = [f.name for f in fields(CallRow)][:11]  # the columns of CALL_ROW_SQL before finish_reason


def _call_row(row: tuple[Any, ...]) -> CallRow:
    return CallRow(
        **dict(zip(_CALL_ROW_FIELDS, row)), finish_reason=orjson.loads(row[11]), reply=reply_text(orjson.loads(row[12]))
    )


def _group_filter(version: str | None, prefix: str | None) -> tuple[str, tuple[str, ...]]:
    args: tuple[str, ...]
    where, args = "", ()
    if version is not None:
        where += " AND session_id IN (SELECT session_id FROM calls WHERE weight_version=?)"
        args += (version,)
    if prefix:
        # A range instead of LIKE: it uses the group index and treats % and _ as plain characters.
        where += " AND group_id >= ? AND group_id < ?"
        args += (prefix, prefix + "\U0010ffff")
    return where, args
