"""The relay on the gateway's port: each request forwarded, bytes unchanged, to the worker
`routing.destination` names (an ASGI app of its own: no routing layer, no body parsing but
`POST /sessions`'s)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson
from multidict import CIMultiDict
from starlette.requests import Request
from yarl import URL

from roost.rollout.gateway.config import GatewayConfig
from roost.rollout.gateway.core.errors import ClientDisconnected, GatewayError, WorkerUnavailable, anthropic_body
from roost.rollout.gateway.core.http_util import read_body
from roost.rollout.gateway.core.sessions import key_hash
from roost.rollout.gateway.workers.merge import merged_health, merged_metrics
from roost.rollout.gateway.workers.replay import Replay
from roost.rollout.gateway.workers.routing import destination, with_session_id, worker_of
from roost.rollout.gateway.workers.supervisor import WorkerSlot, WorkerSupervisor
from roost.rollout.hangup import ClientGone, cancelled_on_hangup
from roost.rollout.keys import presented_key
from roost.rollout.store.reader import TrajectoryReader

log = logging.getLogger("roost.gateway.workers")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
_SCRAPE_S = 5.0
"""How long `/health` and `/metrics` wait for a worker's own answer."""


class KeyDirectory:
    """Which session a session key belongs to, read from the store once per key (the worker that
    created the session committed it before its key went out)."""

    def __init__(self, store_path: str, capacity: int = 100_000):
        self._store_path = store_path
        self._capacity = capacity
        self._sessions: OrderedDict[str, str] = OrderedDict()

    async def session_of(self, key: str) -> str | None:
        digest = key_hash(key)
        sid = self._sessions.get(digest)
        if sid is None:
            sid = await asyncio.to_thread(self._read, digest)
            if sid is None:
                return None  # a worker refuses it with its own 401
            self._sessions[digest] = sid
            while len(self._sessions) > self._capacity:
                self._sessions.popitem(last=False)
        return sid

    def _read(self, digest: str) -> str | None:
        try:
            with TrajectoryReader(self._store_path) as reader:
                record = reader.session_by_key(digest)
        except Exception:  # noqa: BLE001 - no store yet, or busy: a worker answers
            return None
        return record.session_id if record is not None else None


class Relay:
    """The ASGI app on the port of `roost gateway --workers N`."""

    def __init__(self, config: GatewayConfig, *, log_args: list[str] | None = None):
        self.config = config
        self.replay = Replay()
        self.supervisor = WorkerSupervisor(config, log_args=log_args, bring_up=self.replay.bring_up)
        self.keys = KeyDirectory(str(config.store_path))
        self._turn = itertools.count()
        self._http: aiohttp.ClientSession | None = None

    @property
    def slots(self) -> list[WorkerSlot]:
        return self.supervisor.slots

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http_request(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self._start()
                except BaseException as exc:  # noqa: BLE001 - uvicorn reports it and exits
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self._stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _start(self) -> None:
        # on this (the main) thread: the supervisor's thread must outlive every worker it starts
        self.supervisor.start()
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept"),
        )
        log.info(
            "gateway relay: %d workers at %s; recording to %s",
            len(self.slots),
            ", ".join(s.url or "?" for s in self.slots),
            self.config.store_path,
        )

    async def _stop(self) -> None:
        if self._http is not None:
            await self._http.close()
        await asyncio.to_thread(self.supervisor.stop)

    async def _http_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        method, path = scope["method"], scope["path"]
        headers = [(k, v) for k, v in scope["headers"] if k not in _HOP_BY_HOP and k != b"content-length"]
        text_headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers}
        key = presented_key(text_headers)
        try:
            body = await read_body(Request(scope, receive), self.config.max_body_bytes)
            where = destination(method, path, key)
            if where.kind == "broadcast":
                await _answer(send, *await self._broadcast(method, scope, headers, text_headers, body))
                return
            if where.kind == "merged":
                await _answer(send, *await (self._health() if path == "/health" else self._metrics()))
                return
            sid = where.session_id
            if where.kind == "create":
                body, sid = with_session_id(body)
            elif where.kind == "key":
                sid = await self.keys.session_of(key or "")
            slot = self._slot_for(where.kind, sid)
            # a client that leaves cuts the worker's request too (the worker sees it hang up)
            async with cancelled_on_hangup(receive):
                await self._exchange(slot, method, scope, headers, body, send)
        except (ClientDisconnected, ClientGone):
            return  # no one to answer
        except GatewayError as error:
            body = anthropic_body(error) if "/messages" in path else error.body()
            await _answer(send, error.status, [(b"content-type", b"application/json"), *_retry(error)], body)

    def _slot_for(self, kind: str, sid: str | None) -> WorkerSlot:
        if sid is not None:
            return self.slots[worker_of(sid, len(self.slots))]
        if kind == "any":
            up = [s for s in self.slots if s.url is not None] or self.slots
            return up[next(self._turn) % len(up)]
        return self.slots[0]

    async def _exchange(
        self, slot: WorkerSlot, method: str, scope: Scope, headers: list[tuple[bytes, bytes]], body: bytes, send: Send
    ) -> None:
        url = slot.url
        if url is None:
            raise _worker_down(slot, self.config.retry_after_s)
        target = URL(url + scope["raw_path"].decode("latin-1") + _query(scope), encoded=True)
        started = False
        try:
            async with self._http.request(method, target, headers=_multidict(headers), data=body) as answer:
                await send(
                    {
                        "type": "http.response.start",
                        "status": answer.status,
                        "headers": [(k, v) for k, v in answer.raw_headers if k.lower() not in _HOP_BY_HOP],
                    }
                )
                started = True
                async for chunk in answer.content.iter_any():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
        except (TimeoutError, aiohttp.ClientError) as exc:
            if started:
                raise  # the answer is cut short: the client sees the connection end
            log.warning("gateway worker %d failed a %s %s: %s", slot.index, method, scope["path"], exc)
            raise _worker_down(slot, self.config.retry_after_s) from None

    async def _broadcast(
        self,
        method: str,
        scope: Scope,
        headers: list[tuple[bytes, bytes]],
        text_headers: dict[str, str],
        body: bytes,
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Apply a control write on every worker up (one that is down, or dies meanwhile, takes it
        when it is back, before it serves); the first answer, or the first refusal when every
        worker that answered refused it."""
        path_qs = scope["raw_path"].decode("latin-1") + _query(scope)
        write, urls = self.replay.note(
            method, path_qs, text_headers, body, lambda: [s.url for s in self.slots if s.url is not None]
        )
        answers = await asyncio.gather(*(self._call(method, f"{url}{path_qs}", headers, body) for url in urls))
        answered = [a for a in answers if a is not None]
        taken = [a for a in answered if a[0] < 400]
        self.replay.settle(write, applied=bool(taken) or not answered)
        if not answered:  # every worker is starting again: each takes it before it serves
            raise WorkerUnavailable(
                "every gateway worker is starting again; the write is kept for them: retry to see it answered",
                retry_after_s=self.config.retry_after_s,
            )
        if taken and len(taken) < len(answered):
            log.warning(
                "%s %s: %d of %d workers refused it", method, scope["path"], len(answered) - len(taken), len(answered)
            )
        return taken[0] if len(taken) == len(answered) else next(a for a in answered if a[0] >= 400)

    async def _call(
        self, method: str, url: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes] | None:
        """One worker's answer; None when it gave none (it died: it takes the write when back)."""
        try:
            async with self._http.request(method, URL(url, encoded=True), headers=_multidict(headers), data=body) as r:
                content = await r.read()
                kept = [(k, v) for k, v in r.raw_headers if k.lower() not in _HOP_BY_HOP | {b"content-length"}]
                return r.status, kept, content
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.warning("a gateway worker gave no answer to %s %s: %s", method, url, exc)
            return None

    async def _scrape(self, path: str) -> list[tuple[WorkerSlot, int, bytes | None]]:
        async def one(slot: WorkerSlot) -> tuple[WorkerSlot, int, bytes | None]:
            if slot.url is None:
                return slot, 0, None
            try:
                timeout = aiohttp.ClientTimeout(total=_SCRAPE_S)
                async with self._http.get(f"{slot.url}{path}", timeout=timeout) as r:
                    return slot, r.status, await r.read()
            except (TimeoutError, aiohttp.ClientError):
                return slot, 0, None

        return await asyncio.gather(*(one(s) for s in self.slots))

    async def _health(self) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        answers = [
            (slot, _json_object(body) if status else None) for slot, status, body in await self._scrape("/health")
        ]
        health, status = merged_health(answers)
        payload = orjson.dumps(health.model_dump())
        return status, [(b"content-type", b"application/json")], payload

    async def _metrics(self) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        texts = [(slot.index, body.decode()) for slot, status, body in await self._scrape("/metrics") if status == 200]
        return 200, [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")], merged_metrics(texts)


def _worker_down(slot: WorkerSlot, retry_after_s: int) -> WorkerUnavailable:
    return WorkerUnavailable(
        f"gateway worker {slot.index} is starting again after it stopped (its records are kept); "
        "nothing was applied: retry",
        retry_after_s=retry_after_s,
    )


async def _answer(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _retry(error: GatewayError) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode(), v.encode()) for k, v in error.headers().items()]


def _query(scope: Scope) -> str:
    query = scope.get("query_string", b"")
    return f"?{query.decode('latin-1')}" if query else ""


def _multidict(headers: list[tuple[bytes, bytes]]) -> CIMultiDict[str]:
    return CIMultiDict((k.decode("latin-1"), v.decode("latin-1")) for k, v in headers)


def _json_object(body: bytes | None) -> dict[str, Any] | None:
    try:
        value = orjson.loads(body or b"")
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
