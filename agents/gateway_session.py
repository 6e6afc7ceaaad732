"""The runner's calls to the gateway's control plane, and nothing else.

    POST /sessions                 {"group_id", "task", "metadata"} → {"session_id", "key", "base_url"}
    POST /sessions/{sid}/reward    {"reward", "info"}, or {"reward", "call_id", "info"} (a step reward)
    GET  /sessions/{sid}           the session's calls, in order
    POST /sessions/{sid}/finish    {"info": {"status": EpisodeStatus's value, ...}}

`base_url` (`{gateway}/sessions/{sid}/v1`) goes to the harness as its OpenAI base URL, with
the session's `key` as its API key, so every model call of the episode is recorded under the
session. The control plane takes the gateway's admin key; the harness never sees it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from roost.agents.results import EpisodeStatus
from roost.rollout.keys import ADMIN_KEY, bearer


class GatewayError(RuntimeError):
    """The gateway refused or failed a control-plane call."""


@dataclass(frozen=True)
class GatewaySession:
    session_id: str
    key: str
    base_url: str


class GatewayClient:
    def __init__(self, url: str, *, admin_key: str, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.url, timeout=timeout_s, headers=bearer(admin_key))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def create_session(self, group_id: str, task: dict[str, Any],
                             metadata: dict[str, Any] | None = None) -> GatewaySession:
        body = await self._post("/sessions", {"group_id": group_id, "task": task, "metadata": metadata or {}})
        return GatewaySession(body["session_id"], body.get("key", ""), body["base_url"])

    async def post_reward(self, session_id: str, reward: float, info: dict[str, Any] | None = None,
                          call_id: str | None = None) -> None:
        body: dict[str, Any] = {"reward": reward, "info": info or {}}
        if call_id is not None:
            body["call_id"] = call_id
        await self._post(f"/sessions/{session_id}/reward", body)

    async def call_ids(self, session_id: str) -> list[str]:
        """The session's recorded calls, in the order they were made."""
        view = await self._request("GET", f"/sessions/{session_id}")
        return [c["call_id"] for c in sorted(view.get("calls", []), key=lambda c: c["seq"])]

    async def finish(self, session_id: str, status: EpisodeStatus, **info: Any) -> None:
        await self._post(f"/sessions/{session_id}/finish", {"info": {"status": status.value, **info}})

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._request("POST", path, body)

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            response = await self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise GatewayError(f"gateway {self.url} unreachable: {type(exc).__name__}: {exc}") from exc
        if not response.is_success:
            raise GatewayError(f"{method} {self.url}{path} answered {response.status_code}: {response.text[:500]}")
        return response.json()


async def is_gateway(url: str) -> bool:
    """Whether `url` is a roost gateway (its open `/health` names its backend) rather than a plain
    OpenAI endpoint."""
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            response = await http.get(f"{url.rstrip('/')}/health")
        body = response.json()
        return response.status_code == 200 and isinstance(body, dict) and "backend" in body
    except (httpx.HTTPError, ValueError):
        return False


async def recording_gateway(base_url: str | None, admin_key: str | None) -> GatewayClient | None:
    """A client of the gateway at `base_url`, or None when `base_url` is a plain OpenAI endpoint.
    Raises `ValueError` for a gateway without its admin key."""
    if not base_url or not await is_gateway(base_url):
        return None
    if not admin_key:
        raise ValueError(f"{base_url} is a roost gateway: pass its admin key (--admin-key or {ADMIN_KEY.env}) "
                         f"to record the episodes, or use {base_url.rstrip('/')}/v1 to run them unrecorded")
    return GatewayClient(base_url, admin_key=admin_key)
