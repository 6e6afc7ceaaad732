"""Sessions in memory: their keys, agents and token trees, backed by the store.

The store is the truth; memory is a cache that can be rebuilt. A session not in memory
(after a restart, or evicted) is loaded from the store when it is next used, and its
token trees are rebuilt from its recorded calls.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from roost.outcome import EpisodeOutcome, SessionStatus
from roost.rollout.gateway.core.errors import (
    Conflict,
    InvalidRequest,
    InvalidSessionKey,
    SessionFinished,
    SessionNotFound,
)
from roost.rollout.gateway.core.token_tree import AgentTree, Node
from roost.rollout.keys import same_key
from roost.rollout.store.records import AgentRecord, CallRecord, SessionRecord
from roost.rollout.store.trajectory_store import TrajectoryStore

KEY_PREFIX = "rsk-"
DEFAULT_AGENT = "main"
_AGENT_ID = re.compile(r"[A-Za-z0-9_.:@/-]{1,128}")


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def check_agent_id(agent: str, where: str) -> str:
    if not _AGENT_ID.fullmatch(agent):
        raise InvalidRequest(
            f"agent id {agent!r} (from {where}) must be 1-128 characters of letters, digits and _.:@/-",
            param=where,
        )
    return agent


@dataclass
class SessionState:
    record: SessionRecord
    agents: dict[str, str | None] = field(default_factory=dict)  # agent -> parent agent
    trees: dict[str, AgentTree] = field(default_factory=dict)
    next_seq: int = 0
    max_nodes: int = 4096
    trace_parent: str | None = None
    """The W3C traceparent its model calls are parented on when they bring none (kept in memory only)."""

    @property
    def session_id(self) -> str:
        return self.record.session_id

    @property
    def finished(self) -> bool:
        return self.record.status is not SessionStatus.OPEN

    def tree(self, agent: str) -> AgentTree:
        tree = self.trees.get(agent)
        if tree is None:
            tree = self.trees[agent] = AgentTree(self.max_nodes)
        return tree

    def take_seq(self) -> int:
        seq = self.next_seq
        self.next_seq += 1
        return seq


class SessionRegistry:
    def __init__(
        self,
        store: TrajectoryStore,
        *,
        default_policy: str,
        max_nodes_per_agent: int,
        max_in_memory: int,
        node_from_call: Callable[[CallRecord], Node],
    ):
        self.store = store
        self.default_policy = default_policy
        self.max_nodes = max_nodes_per_agent
        self.max_in_memory = max_in_memory
        self.node_from_call = node_from_call
        self._sessions: OrderedDict[str, SessionState] = OrderedDict()
        self._by_key: dict[str, str] = {}
        self._loading: dict[str, asyncio.Future] = {}
        self._anonymous: SessionState | None = None
        self._anonymous_lock = asyncio.Lock()

    @property
    def in_memory(self) -> int:
        return len(self._sessions)

    def _remember(self, state: SessionState) -> None:
        self._sessions[state.session_id] = state
        self._sessions.move_to_end(state.session_id)
        self._by_key[state.record.key_hash] = state.session_id
        while len(self._sessions) > self.max_in_memory:
            sid, old = self._sessions.popitem(last=False)
            self._by_key.pop(old.record.key_hash, None)

    async def create(
        self, *, group_id: str | None, task: dict, metadata: dict, session_id: str | None, policy: str | None
    ) -> tuple[SessionState, str]:
        key = KEY_PREFIX + secrets.token_urlsafe(24)
        sid = session_id or uuid.uuid4().hex
        record = SessionRecord(
            session_id=sid,
            key_hash=key_hash(key),
            group_id=group_id,
            task=task,
            metadata=metadata,
            reasoning_policy=policy or self.default_policy,
            created_at=time.time(),
        )
        if sid in self._sessions or await self.store.read(lambda r: r.session(sid)) is not None:
            raise Conflict(f"session {sid!r} already exists; choose another session_id or omit it")
        await self.store.create_session(record)
        state = SessionState(record, max_nodes=self.max_nodes)
        self._remember(state)
        return state, key

    async def anonymous(self) -> SessionState:
        """The session for calls made without one (sessionless mode `record`)."""
        if self._anonymous is None:
            async with self._anonymous_lock:  # the first calls may arrive together
                if self._anonymous is None:
                    state, _ = await self.create(
                        group_id=None,
                        task={},
                        metadata={"anonymous": True},
                        session_id=f"anon-{uuid.uuid4().hex[:12]}",
                        policy=None,
                    )
                    self._anonymous = state
        return self._anonymous

    async def get(self, sid: str) -> SessionState:
        state = self._sessions.get(sid)
        if state is not None:
            self._sessions.move_to_end(sid)
            return state
        pending = self._loading.get(sid)
        if pending is not None:
            return await asyncio.shield(pending)
        future = asyncio.get_running_loop().create_future()
        self._loading[sid] = future
        try:
            state = await self._load(sid)
            future.set_result(state)
            return state
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: a lone loader must not log "never retrieved"
            raise
        finally:
            del self._loading[sid]

    async def by_key(self, key: str) -> SessionState:
        digest = key_hash(key)
        sid = self._by_key.get(digest)
        if sid is None:
            record = await self.store.read(lambda r: r.session_by_key(digest))
            if record is None:
                raise InvalidSessionKey(
                    "this session key matches no session; create one with POST /sessions and use the "
                    "key it returns, or address the session by URL (/sessions/{id}/v1)"
                )
            sid = record.session_id
        return await self.get(sid)

    async def _load(self, sid: str) -> SessionState:
        def read(reader):
            record = reader.session(sid)
            if record is None:
                return None
            # A finished session takes no more calls: its token trees are not needed.
            calls = reader.calls(sid) if record.status is SessionStatus.OPEN else []
            return record, reader.agents(sid), calls

        found = await self.store.read(read)
        if found is None:
            raise SessionNotFound(
                f"no session {sid!r} on this gateway; create one with POST /sessions (its response "
                "holds the base_url to use)"
            )
        record, agents, calls = found
        state = SessionState(record, max_nodes=self.max_nodes)
        state.agents = {a.agent_id: a.parent_agent for a in agents}
        for call in calls:
            if len(call.prompt_ids):
                state.tree(call.agent_id).add(self.node_from_call(call))
        state.next_seq = (max(c.seq for c in calls) + 1) if calls else 0
        self._remember(state)
        return state

    async def ensure_agent(self, state: SessionState, agent: str, parent: str | None) -> str | None:
        """Record the agent the first time it calls; answers its parent agent."""
        if agent in state.agents:
            return state.agents[agent]
        state.agents[agent] = parent
        await self.store.add_agent(AgentRecord(state.session_id, agent, parent, time.time()))
        return parent

    def check_key(self, state: SessionState, key: str) -> None:
        if not same_key(key_hash(key), state.record.key_hash):
            raise InvalidSessionKey(
                f"the key sent is not the key of session {state.session_id!r}; send that session's key "
                "(from POST /sessions) as 'Authorization: Bearer <key>' or 'x-api-key'"
            )

    @staticmethod
    def check_open(state: SessionState) -> None:
        if state.finished:
            raise SessionFinished(
                f"session {state.session_id!r} is finished; no more calls can be recorded in it; "
                "create a new session for a new episode"
            )

    async def finish(self, state: SessionState, outcome: EpisodeOutcome, info: dict) -> None:
        if state.finished:
            return
        now = time.time()
        await self.store.finish_session(state.session_id, now, outcome, info)
        record = state.record
        record.status, record.finished_at, record.outcome, record.finish_info = (
            SessionStatus.FINISHED,
            now,
            outcome,
            info,
        )
        state.trees.clear()  # a finished session takes no more calls: free its token trees
