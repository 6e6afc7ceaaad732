"""`GET /samples`: the training samples of the given groups' sessions, a page at a time.

The query's groups are read in the order given, each group's sessions in the store's order
(creation time, then id); a page holds at most `limit` sessions, each whole (its outcome, every
sample, the calls refused), built by the store's one sample builder (`paths.training_sessions`).
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.datastructures import QueryParams

from roost.rollout.gateway.control.cursor import CursorError, PageCursor, groups_digest
from roost.rollout.gateway.control.wire import (
    SAMPLES_PAGE_DEFAULT,
    SAMPLES_PAGE_MAX,
    SamplesPage,
    SessionSamplesView,
)
from roost.rollout.gateway.core.errors import InvalidRequest
from roost.rollout.store.paths import training_sessions
from roost.rollout.store.reader import TrajectoryReader
from roost.rollout.store.records import SessionRecord


@dataclass(frozen=True)
class PageQuery:
    groups: list[str]
    limit: int
    cursor: PageCursor | None


def page_query(params: QueryParams, secret: bytes) -> PageQuery:
    """The query's groups, page size and cursor; `InvalidRequest` (400) saying what to send instead."""
    groups = params.getlist("group")
    if not groups:
        raise InvalidRequest(
            "GET /samples needs the groups to read: send one group=<group id> parameter per group",
            param="group",
        )
    cursor = None
    if params.get("cursor"):
        try:
            cursor = PageCursor.decode(params["cursor"], secret, groups)
        except CursorError as exc:
            raise InvalidRequest(str(exc), param="cursor") from None
    return PageQuery(groups, _limit(params.get("limit")), cursor)


def _limit(text: str | None) -> int:
    if text is None:
        return SAMPLES_PAGE_DEFAULT
    if not text.isdigit() or not 1 <= int(text) <= SAMPLES_PAGE_MAX:
        raise InvalidRequest(
            f"limit={text!r} is not a page size; send a whole number of sessions from 1 to {SAMPLES_PAGE_MAX} "
            f"(default {SAMPLES_PAGE_DEFAULT})",
            param="limit",
        )
    return int(text)


def read_page(reader: TrajectoryReader, query: PageQuery, secret: bytes) -> SamplesPage:
    """The page `query` asks for, and the cursor of the next one (None after the last group)."""
    index, after = (query.cursor.group, query.cursor.after) if query.cursor else (0, None)
    rows: list[SessionRecord] = []
    while index < len(query.groups) and len(rows) < query.limit:
        want = query.limit - len(rows)
        got = reader.group_sessions_after(query.groups[index], after, want)
        rows += got
        if len(got) < want:  # the group has no more: the next one starts from its beginning
            index, after = index + 1, None
        else:
            after = (got[-1].created_at, got[-1].session_id)
    next_cursor = (
        PageCursor(groups_digest(query.groups), index, after).encode(secret) if index < len(query.groups) else None
    )
    sessions = [SessionSamplesView.of(s) for s in training_sessions(reader, rows)]
    return SamplesPage(sessions=sessions, next_cursor=next_cursor)
