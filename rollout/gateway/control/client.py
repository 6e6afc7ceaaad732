"""The gateway's control plane, as its clients call it: the runner's sessions, the trainer's samples
and pause.

    POST /sessions                 CreateSession  → SessionCreated (session_id, key, base_url, ...)
    POST /sessions/{sid}/reward    PostReward     → Ack (to the session, or to one call: a step reward)
    GET  /sessions/{sid}                          → SessionDetail (the session's calls, each with its request and reply)
    GET  /sessions?group=G                        → SessionList (the trainer's backlog after a resume)
    GET  /samples?group=G&cursor=C                → SamplesPage (the trainer's batch, page by page)
    POST /sessions/{sid}/finish    FinishSession  → SessionSummary ({"outcome": EpisodeOutcome, "info": {...}})
    POST /admin/pause|resume       PauseRequest   → PauseState

The bodies and answers are the gateway's own wire models (`roost.rollout.gateway.control.wire`, which
imports nothing of the server). `base_url` (`{gateway}/sessions/{sid}/v1`) goes to the harness
as its OpenAI base URL, with the session's `key` as its API key, so every model call of the
episode is recorded under the session. The control plane takes the gateway's admin key; the
harness never sees it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from roost.outcome import EpisodeOutcome
from roost.rollout.gateway.control.wire import (
    WORKER_UNAVAILABLE,
    Ack,
    AddEngine,
    CreateSession,
    EngineList,
    EngineView,
    FinishSession,
    GatewayHealth,
    PauseRequest,
    PauseState,
    PostReward,
    SamplesPage,
    SessionCreated,
    SessionDetail,
    SessionList,
    SessionListItem,
    SessionSummary,
    SetWeightVersion,
)
from roost.rollout.keys import ADMIN_KEY, bearer
from roost.rollout.store.samples import SessionSamples
from roost.tracing import Tracing

Answer = TypeVar("Answer", bound=BaseModel)


class ControlPlaneError(RuntimeError):
    """The gateway refused or failed a control-plane call."""


class GatewayUnreachable(ControlPlaneError):
    """No answer came back (connection refused or reset, timeout): the call may be sent again."""


PAGE_TRIES = 4
"""How often `training_sessions` asks for one page before it gives up."""
WORKER_WAIT_S = 120.0
"""How long a request answered `gateway_worker_unavailable` (a worker of `roost gateway --workers N`
starting again) is sent again, after each answer's Retry-After."""


class GatewayClient(AbstractAsyncContextManager["GatewayClient"]):
    """`async with GatewayClient(url, admin_key=...) as gateway:` closes its connections at the end."""

    def __init__(
        self, url: str, *, admin_key: str | None, timeout_s: float = 30.0, tracing: Tracing | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.url, timeout=timeout_s, headers=bearer(admin_key))
        if tracing is not None:
            tracing.instrument_httpx(self._http)  # traceparent on every control-plane call

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def create_session(
        self,
        group_id: str,
        task: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        traceparent: str | None = None,
    ) -> SessionCreated:
        """`traceparent`: the span the session's model calls are parented on (the episode's)."""
        body = CreateSession(group_id=group_id, task=task, metadata=metadata or {}, traceparent=traceparent)
        return await self._request("POST", "/sessions", SessionCreated, body)

    async def post_reward(
        self, session_id: str, reward: float, info: dict[str, Any] | None = None, call_id: str | None = None
    ) -> None:
        body = PostReward(reward=reward, info=info or {}, call_id=call_id)
        await self._request("POST", f"/sessions/{session_id}/reward", Ack, body)

    async def session(self, session_id: str) -> SessionDetail:
        """`GET /sessions/{sid}`: the session with its calls (each call's request and reply)."""
        return await self._request("GET", f"/sessions/{session_id}", SessionDetail)

    async def call_ids(self, session_id: str) -> list[str]:
        """The session's recorded calls, in the order they were made."""
        view = await self.session(session_id)
        return [c.call_id for c in sorted(view.calls, key=lambda c: c.seq)]

    async def sessions(self, group_id: str | None = None) -> list[SessionListItem]:
        """The gateway's sessions (of one group), oldest first."""
        params = {"group": group_id} if group_id is not None else None
        return (await self._request("GET", "/sessions", SessionList, params=params)).sessions

    async def samples_page(
        self, group_ids: list[str], cursor: str | None = None, limit: int | None = None
    ) -> SamplesPage:
        """One page of `GET /samples`: the groups' sessions after `cursor` (None: from the first)."""
        params: list[tuple[str, str | int]] = [("group", g) for g in group_ids]
        params += [("cursor", cursor)] if cursor else []
        params += [("limit", limit)] if limit is not None else []
        return await self._request("GET", "/samples", SamplesPage, params=params)

    async def training_sessions(
        self, group_ids: Iterable[str], page_size: int | None = None
    ) -> AsyncIterator[SessionSamples]:
        """Every session of the groups with its outcome and samples, page after page; a page whose
        answer was lost is asked for again from the same cursor (the same sessions come back)."""
        groups, cursor = list(group_ids), None
        while True:
            page = await self._page(groups, cursor, page_size)
            for session in page.sessions:
                yield session.session_samples()
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def _page(self, groups: list[str], cursor: str | None, page_size: int | None) -> SamplesPage:
        for attempt in range(1, PAGE_TRIES):
            try:
                return await self.samples_page(groups, cursor, page_size)
            except GatewayUnreachable:
                await asyncio.sleep(0.5 * attempt)
        return await self.samples_page(groups, cursor, page_size)  # the last try raises what it meets

    async def image(self, sha256: str) -> bytes:
        """An image's file bytes from the gateway's store, by content address (`GET /images/{sha256}`)."""
        try:
            response = await self._http.get(f"/images/{sha256}")
        except httpx.HTTPError as exc:
            raise GatewayUnreachable(f"gateway {self.url} unreachable: {type(exc).__name__}: {exc}") from exc
        if not response.is_success:
            raise ControlPlaneError(
                f"GET {self.url}/images/{sha256} answered {response.status_code}: {response.text[:500]}"
            )
        return response.content

    async def finish(self, session_id: str, outcome: EpisodeOutcome, **info: Any) -> None:
        """`info`: anything else about the episode, for people (task id, steps, stop reason)."""
        body = FinishSession(outcome=outcome, info=info)
        await self._request("POST", f"/sessions/{session_id}/finish", SessionSummary, body)

    async def pause(self) -> PauseState:
        """Stop the gateway admitting calls; it answers once the in-flight ones finished (or its
        drain timeout passed: then `drained` is false)."""
        return await self._request("POST", "/admin/pause", PauseState, PauseRequest())

    async def resume(self) -> PauseState:
        return await self._request("POST", "/admin/resume", PauseState)

    async def engines(self) -> EngineList:
        """The engines behind the gateway, each with its state, load and weight version."""
        return await self._request("GET", "/admin/engines", EngineList)

    async def add_engine(self, url: str) -> EngineView:
        """Put the engine at `url` behind the gateway (refused when it serves another model)."""
        return await self._request("POST", "/admin/engines", EngineView, AddEngine(url=url))

    async def remove_engine(self, engine_id: str) -> EngineView:
        """Take an engine from behind the gateway; its sessions move on their next call."""
        return await self._request("DELETE", f"/admin/engines/{engine_id}", EngineView)

    async def set_weight_version(self, weight_version: str) -> EngineList:
        """The weight-sync barrier: engines that do not report `weight_version` leave rotation."""
        return await self._request(
            "POST", "/admin/weight_version", EngineList, SetWeightVersion(weight_version=weight_version)
        )

    async def health(self) -> GatewayHealth:
        """`GET /health`, read whether it answers 200 or 503 (degraded: its body still says why)."""
        try:
            response = await self._http.get("/health")
        except httpx.HTTPError as exc:
            raise GatewayUnreachable(f"gateway {self.url} unreachable: {type(exc).__name__}: {exc}") from exc
        try:
            return GatewayHealth.model_validate_json(response.content)
        except ValidationError as exc:
            raise ControlPlaneError(
                f"GET {self.url}/health answered {response.status_code}, not a roost gateway's health: {exc}"
            ) from exc

    async def _request(
        self, method: str, path: str, answer: type[Answer], body: BaseModel | None = None, params: Any = None
    ) -> Answer:
        # Only the fields the caller gave travel; the gateway applies its own defaults.
        payload = None if body is None else body.model_dump(mode="json", exclude_unset=True, exclude_none=True)
        deadline = time.monotonic() + WORKER_WAIT_S
        while True:
            try:
                response = await self._http.request(method, path, json=payload, params=params)
            except httpx.HTTPError as exc:
                raise GatewayUnreachable(f"gateway {self.url} unreachable: {type(exc).__name__}: {exc}") from exc
            if not _worker_restarting(response) or time.monotonic() > deadline:
                break
            await asyncio.sleep(float(response.headers.get("retry-after", "1")))
        if not response.is_success:
            raise ControlPlaneError(f"{method} {self.url}{path} answered {response.status_code}: {response.text[:500]}")
        try:
            return answer.model_validate_json(response.content)
        except ValidationError as exc:
            raise ControlPlaneError(
                f"{method} {self.url}{path} answered something other than a {answer.__name__} "
                f"(is it a roost gateway of this version?): {exc}"
            ) from exc


def _worker_restarting(response: httpx.Response) -> bool:
    """A 503 saying one of the gateway's workers is starting again (nothing was applied)."""
    if response.status_code != 503:
        return False
    try:
        return response.json()["error"]["code"] == WORKER_UNAVAILABLE
    except (ValueError, KeyError, TypeError):
        return False


async def is_gateway(url: str) -> bool:
    """Whether `url` is a roost gateway (its open `/health` names its backend) rather than a plain
    OpenAI endpoint."""
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            response = await http.get(f"{url.rstrip('/')}/health")
        GatewayHealth.model_validate_json(response.content)
    except (httpx.HTTPError, ValidationError):
        return False
    return response.status_code == 200


async def recording_gateway(
    base_url: str | None, admin_key: str | None, tracing: Tracing | None = None
) -> GatewayClient | None:
    """A client of the gateway at `base_url`, or None when `base_url` is a plain OpenAI endpoint.
    Raises `ValueError` for a gateway without its admin key."""
    if not base_url or not await is_gateway(base_url):
        return None
    if not admin_key:
        raise ValueError(
            f"{base_url} is a roost gateway: pass its admin key (--admin-key or {ADMIN_KEY.env}) "
            f"to record the episodes, or use {base_url.rstrip('/')}/v1 to run them unrecorded"
        )
    return GatewayClient(base_url, admin_key=admin_key, tracing=tracing)
