"""The viewer's reads of a trajectory store: each opens its own read-only snapshot through the
store's browser (`roost.rollout.store.browse`), so a page is safe from any thread and sees the
store as a running gateway has committed it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from roost.rollout.store.browse import StoreBrowser
from roost.rollout.store.browse_rows import (
    CallDetail,
    CallRow,
    CallTiming,
    GroupRow,
    Page,
    SessionRow,
    StepRow,
    TokenWindow,
)
from roost.rollout.store.records import ImageRecord

REWARD_LIMIT = 1000  # rewards listed on a session's page


class StoreQueries:
    """Read-only queries over one store file; opening it checks the file is a store this roost reads
    (`StoreUnreadable` otherwise)."""

    def __init__(self, path: Path):
        self.path = path
        self.browser().close()

    def browser(self) -> StoreBrowser:
        return StoreBrowser(self.path)

    def steps(self) -> list[StepRow]:
        with self.browser() as store:
            return store.steps()

    def groups(self, page: Page, *, version: str | None = None, prefix: str | None = None) -> list[GroupRow]:
        with self.browser() as store:
            return store.groups(page, version=version, prefix=prefix)

    def sessions(self, page: Page, *, group_id: str | None = None) -> list[SessionRow]:
        with self.browser() as store:
            return store.session_rows(page, group_id=group_id)

    def session(self, session_id: str) -> SessionRow | None:
        with self.browser() as store:
            return store.session_row(session_id)

    def agents(self, session_id: str) -> list[tuple[str, str | None]]:
        with self.browser() as store:
            return [(a.agent_id, a.parent_agent) for a in store.agents(session_id)]

    def calls(self, session_id: str, page: Page) -> list[CallRow]:
        with self.browser() as store:
            return store.call_rows(session_id, page)

    def call_timings(self, session_id: str) -> list[CallTiming]:
        with self.browser() as store:
            return store.call_timings(session_id)

    def rewards(self, session_id: str) -> list[tuple[str | None, str | None, float, dict[str, Any]]]:
        """(agent, call, reward, info) in the order they were posted: per-turn rewards name a call."""
        with self.browser() as store:
            return [(r.agent_id, r.call_id, r.reward, r.info) for r in store.rewards(session_id, REWARD_LIMIT)]

    def call_detail(self, call_id: str) -> CallDetail | None:
        with self.browser() as store:
            return store.call_detail(call_id)

    def image(self, sha256: str) -> ImageRecord | None:
        with self.browser() as store:
            return store.image(sha256)

    def call_tokens(self, call_id: str, start: int, limit: int) -> TokenWindow | None:
        with self.browser() as store:
            return store.call_tokens(call_id, start, limit)
