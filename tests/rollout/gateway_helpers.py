"""Shared pieces of the gateway tests: a spy in front of the scripted engine, gateways.

Everything here is a real server on 127.0.0.1; the engine is the suite's
`scripted_engine_url` (tests/conftest.py), whose replies each test forces per request. The spy is test code, not a roost part: it
forwards `/generate` to the engine unchanged and remembers, per request id, the ids the
engine received and the ids it sampled, so tests can compare them with the store.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx
import orjson
from aiohttp import web

from roost.rollout.gateway.config import GatewayConfig
from roost.rollout.gateway.launch import GatewayThread
from roost.rollout.gateway.preflight import TOOLS as WEATHER_TOOLS  # noqa: F401 (the tests' tool list)
from roost.rollout.keys import bearer
from roost.rollout.store.reader import TrajectoryReader
from roost.serving.listen import bind_listener, bound_port

TOOL_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
THINK = "<think>\nThe user asks about the weather; I should call the tool.\n</think>\n\n"


def say(text: str) -> dict:
    """Request fields that make the scripted engine reply `text` (pass as extra_body)."""
    return {"custom_params": {"scripted_reply": text}}


@dataclass
class Seen:
    input_ids: list[int]
    output_ids: list[int] = field(default_factory=list)
    image_data: list[str] = field(default_factory=list)
    """The images the call carried (SGLang's `image_data`, vLLM's `content_parts` URLs)."""


class EngineSpy:
    """A pass-through proxy in front of the engine (roost's, SGLang's or vLLM's) that remembers
    what crossed it."""

    def __init__(self, engine_url: str):
        self.engine_url = engine_url
        self._sock = bind_listener()
        self.port = bound_port(self._sock)
        self.url = f"http://127.0.0.1:{self.port}"
        self.seen: dict[str, Seen] = {}
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> EngineSpy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._http.close(), self._loop).result(10)
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._sock.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        runner = self._runner = web.AppRunner(app, access_log=None)

        async def start() -> None:
            await runner.setup()
            await web.SockSite(runner, self._sock).start()
            self._http = aiohttp.ClientSession()

        self._loop.run_until_complete(start())
        self._ready.set()
        self._loop.run_forever()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        url = f"{self.engine_url}{request.path_qs}"
        seen = None
        if request.path in GENERATE_PATHS and body:
            payload = orjson.loads(body)
            custom = (payload.get("sampling_params") or {}).get("custom_params") or {}
            mode = custom.pop("spy_mode", None)
            if mode is not None:
                body = orjson.dumps(payload)
                misbehaved = await _misbehave(mode)
                if misbehaved is not None:
                    return misbehaved
            images = payload.get("image_data") or [p.get("url") for p in payload.get("content_parts") or []]
            seen = Seen(list(payload.get("input_ids") or payload.get("token_ids") or []), image_data=images)
            self.seen[payload.get("rid") or payload.get("request_id") or ""] = seen
        headers = {"content-type": "application/json"}
        if "Authorization" in request.headers:
            headers["Authorization"] = request.headers["Authorization"]
        async with self._http.request(request.method, url, data=body, headers=headers) as up:
            if up.headers.get("content-type", "").startswith("text/event-stream"):
                out = web.StreamResponse(status=up.status, headers={"content-type": "text/event-stream"})
                await out.prepare(request)
                async for line in up.content:
                    if seen is not None and line.startswith(b"data:") and line.strip() != b"data: [DONE]":
                        seen.output_ids.extend(_output_ids(orjson.loads(line[5:])))
                    await out.write(line)
                await out.write_eof()
                return out
            raw = await up.read()
            if seen is not None and up.status == 200:
                seen.output_ids = _output_ids(orjson.loads(raw))
            return web.Response(body=raw, status=up.status, content_type=up.content_type)


# SGLang's (and roost's engine's) generate route, and vLLM's token-in one.
GENERATE_PATHS = ("/generate", "/inference/v1/generate")


def _output_ids(answer: dict) -> list[int]:
    """The sampled ids of a generate answer or stream chunk, SGLang's or vLLM's."""
    if "choices" in answer:
        return list(answer["choices"][0].get("token_ids") or [])
    return list(answer["output_ids"])


async def _misbehave(mode: str) -> web.Response | None:
    """Engine failures on demand: `custom_params.spy_mode` = slow:<s> | error500 | garbage | wrong_shape."""
    if mode.startswith("slow:"):
        await asyncio.sleep(float(mode.split(":", 1)[1]))
        return None
    if mode == "error500":
        return web.json_response({"error": {"message": "CUDA out of memory"}}, status=500)
    if mode == "garbage":
        return web.Response(text="<html>502 bad gateway</html>", status=200, content_type="text/html")
    if mode == "wrong_shape":
        return web.json_response({"text": "hi", "meta_info": {}})
    raise ValueError(f"unknown spy_mode {mode!r}")


def misbehave(mode: str, reply: str = "ok") -> dict:
    """extra_body making the spy fail this one request the given way."""
    return {"custom_params": {"scripted_reply": reply, "spy_mode": mode}}


def gateway_config(engine_url: str, store: Path, **overrides) -> GatewayConfig:
    return GatewayConfig(**{"engine_url": engine_url, "model": "tiny", "store_path": store, **overrides})


def start_gateway(engine_url: str, store: Path, **overrides) -> GatewayThread:
    server = GatewayThread(gateway_config(engine_url, store, **overrides))
    server.start()
    return server


@contextmanager
def running_gateway(engine_url: str, store: Path) -> Iterator[tuple[GatewayThread, Path]]:
    """A gateway on the engine: (server, store)."""
    server = start_gateway(engine_url, store)
    try:
        yield server, store
    finally:
        server.stop()


@contextmanager
def spied_gateway(engine_url: str, store: Path) -> Iterator[tuple[GatewayThread, Path, EngineSpy]]:
    """A gateway on the engine behind a spy: (server, store, spy)."""
    with EngineSpy(engine_url) as spy:
        server = start_gateway(spy.url, store)
        try:
            yield server, store, spy
        finally:
            server.stop()


def new_session(server: GatewayThread, **body) -> dict:
    """POST /sessions with the gateway's admin key; the answer holds the session's key."""
    resp = httpx.post(f"{server.url}/sessions", json=body, headers=bearer(server.admin_key))
    resp.raise_for_status()
    return resp.json()


def stored_calls(store: Path, session_id: str):
    with TrajectoryReader(store) as reader:
        return reader.calls(session_id)


def assert_token_exact(store: Path, session_id: str, spy: EngineSpy) -> int:
    """Every stored call's ids are exactly what the engine received and sampled."""
    calls = stored_calls(store, session_id)
    assert calls, "no calls recorded"
    for call in calls:
        seen = spy.seen.get(call.call_id)
        assert seen is not None, f"the engine never saw call {call.call_id}"
        assert list(call.prompt_ids) == seen.input_ids, f"call {call.seq}: prompt ids differ from the engine's"
        assert list(call.sampled_ids) == seen.output_ids, f"call {call.seq}: sampled ids differ from the engine's"
        assert len(call.sampled_logprobs) == len(call.sampled_ids)
    return len(calls)


def assert_one_path(store: Path, session_id: str, spy: EngineSpy, endpoints: list[str]) -> None:
    """The session's calls, on these endpoints in turn, each extend the previous one's path
    exactly (the template re-renders every reply as sampled), token-exact."""
    calls = stored_calls(store, session_id)
    assert [c.endpoint for c in calls] == endpoints
    assert [c.kind for c in calls] == ["root"] + ["extend"] * (len(calls) - 1)
    assert [c.reuse for c in calls] == ["none"] + ["exact"] * (len(calls) - 1)
    for parent, child in zip(calls, calls[1:]):
        path = list(parent.prompt_ids) + list(parent.sampled_ids)
        assert child.parent_call_id == parent.call_id and list(child.prompt_ids[: len(path)]) == path
    assert_token_exact(store, session_id, spy)
