"""Async client of the env server. Imports wire types only, never server code.

`EnvClient` speaks the episode API (many episodes, by id); `RemoteEnv` adapts one
client to the single-episode `Env` protocol, so code written against an in-process
env runs unchanged against a server.

HTTP errors come back as the `roost.envs.errors` classes the server raised; a failed
connection or an unreadable 5xx becomes `EnvFaultError`.
"""

from __future__ import annotations

from typing import Any

import httpx

from roost.envs import errors, wire
from roost.envs.protocol import Action, EnvInfo, Reset, Step, Task, check_action
from roost.tracing import Tracing


class EnvClient:
    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 300.0,
        client: httpx.AsyncClient | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = client or httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout_s, limits=httpx.Limits(max_connections=256)
        )
        if tracing is not None:
            tracing.instrument_httpx(self._client)  # traceparent on every episode request

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> EnvClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def info(self) -> EnvInfo:
        i = wire.EnvInfoResponse.model_validate(await self._request("GET", "/info"))
        return EnvInfo(i.name, i.version, i.tools, tuple(i.splits), i.description, i.versions)

    async def tasks(self, split: str) -> list[Task]:
        listing = wire.TaskList.model_validate(await self._request("GET", "/tasks", params={"split": split}))
        return [Task(t.id, t.split, t.metadata) for t in listing.tasks]

    async def health(self) -> wire.Health:
        """The server's health; its status is "degraded" (a 503) while a worker is being replaced."""
        response = await self._send("GET", "/health")
        if response.is_success or response.status_code == 503:
            return wire.Health.model_validate(response.json())
        raise _error_of(response)

    async def create(
        self,
        *,
        task_id: str | None = None,
        seed: int | None = None,
        split: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[str, Reset]:
        body = wire.ResetRequest(task_id=task_id, seed=seed, split=split, options=options or {})
        created = wire.EpisodeCreated.model_validate(
            await self._request("POST", "/episodes", json=body.model_dump(exclude_none=True))
        )
        return created.episode_id, Reset(
            created.task_id, created.observation.to_protocol(), created.tools, created.info
        )

    async def step(self, episode_id: str, action: Action) -> Step:
        check_action(action)  # the server's own check, before a deep structure reaches the JSON encoder
        body = wire.StepRequest.of(action).model_dump()
        r = wire.StepResponse.model_validate(await self._request("POST", f"/episodes/{episode_id}/step", json=body))
        return Step(r.observation.to_protocol(), r.reward, r.terminated, r.truncated, r.info, r.tools)

    async def workspace(self, episode_id: str) -> bytes:
        """The episode's working tree as a gzip'd tar (`GET /episodes/{id}/workspace`)."""
        response = await self._send("GET", f"/episodes/{episode_id}/workspace")
        if response.is_success:
            return response.content
        raise _error_of(response)

    async def status(self, episode_id: str) -> wire.EpisodeView:
        return wire.EpisodeView.model_validate(await self._request("GET", f"/episodes/{episode_id}"))

    async def delete(self, episode_id: str) -> wire.EpisodeView:
        return wire.EpisodeView.model_validate(await self._request("DELETE", f"/episodes/{episode_id}"))

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        response = await self._send(method, path, **kwargs)
        if response.is_success:
            return response.json()
        raise _error_of(response)

    async def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return await self._client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise errors.EnvFaultError(f"env server {self.base_url} unreachable: {type(exc).__name__}: {exc}") from exc


def _error_of(response: httpx.Response) -> errors.EnvError:
    try:
        detail = wire.ErrorBody.model_validate(response.json()).error
        code, message = detail.type, detail.message
    except ValueError:
        code, message = "env_error" if response.status_code >= 500 else "bad_request", response.text[:500]
    fallback = errors.EnvFaultError if response.status_code >= 500 else errors.BadRequestError
    cls = errors.ERRORS_BY_CODE.get(code, fallback)
    if cls is errors.CapacityError:
        error: errors.EnvError = errors.CapacityError(message, float(response.headers.get("Retry-After", "1")))
    else:
        error = cls(message)
    # The message stays the server's own (agents show it to models); where it came from rides along.
    error.add_note(f"{response.status_code} from {response.request.method} {response.request.url}")
    return error


class RemoteEnv:
    """The `Env` protocol over HTTP: one episode at a time, deleted on the next reset or close."""

    def __init__(self, client: EnvClient, info: EnvInfo) -> None:
        self._client = client
        self._info = info
        self._episode_id: str | None = None

    @classmethod
    async def connect(cls, base_url: str) -> RemoteEnv:
        client = EnvClient(base_url)
        return cls(client, await client.info())

    @property
    def info(self) -> EnvInfo:
        return self._info

    @property
    def episode_id(self) -> str | None:
        return self._episode_id

    async def tasks(self, split: str) -> list[Task]:
        return await self._client.tasks(split)

    async def reset(
        self,
        *,
        task_id: str | None = None,
        seed: int | None = None,
        split: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> Reset:
        await self._end()
        self._episode_id, reset = await self._client.create(task_id=task_id, seed=seed, split=split, options=options)
        return reset

    async def step(self, action: Action) -> Step:
        if self._episode_id is None:
            raise errors.EpisodeFinishedError("no episode is running; call reset first")
        return await self._client.step(self._episode_id, action)

    async def close(self) -> None:
        await self._end()
        await self._client.aclose()

    async def _end(self) -> None:
        episode_id, self._episode_id = self._episode_id, None
        if episode_id is not None:
            try:
                await self._client.delete(episode_id)
            except errors.EpisodeNotFoundError:
                pass
