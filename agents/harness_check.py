"""Conformance checks for harnesses: are their recorded trajectories token-exact?

`EngineRecorder` is a pass-through proxy between the gateway and the engine that remembers,
per request id, the token ids the engine received and the ids it sampled. After an episode,
`token_exact_problems` compares them with what the gateway stored for the session: a
conforming harness (any client, any message format) leaves nothing to report.

    with EngineRecorder(engine_url) as recorder:        # gateway's engine_url = recorder.url
        ... run episodes through the gateway ...
        assert token_exact_problems(store_path, session_id, recorder) == []
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson


@dataclass
class EngineCall:
    input_ids: list[int]
    output_ids: list[int] = field(default_factory=list)


class EngineRecorder:
    """An aiohttp proxy on a 127.0.0.1 port it binds (any free one), on its own thread; a context manager."""

    def __init__(self, engine_url: str) -> None:
        from roost.serving.listen import bind_listener, bound_port

        self.engine_url = engine_url.rstrip("/")
        self._sock = bind_listener("127.0.0.1", 0)
        self.port = bound_port(self._sock)
        self.url = f"http://127.0.0.1:{self.port}"
        self.calls: dict[str, EngineCall] = {}
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="roost-engine-recorder")

    def __enter__(self) -> EngineRecorder:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the engine recorder did not start within 10s")
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        from aiohttp import ClientSession, web

        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)

        async def start() -> None:
            await self._runner.setup()
            await web.SockSite(self._runner, self._sock).start()
            self._http = ClientSession()

        self._loop.run_until_complete(start())
        self._ready.set()
        self._loop.run_forever()

    async def _stop(self) -> None:
        await self._http.close()
        await self._runner.cleanup()
        self._sock.close()

    async def _forward(self, request):
        from aiohttp import web

        body = await request.read()
        call = None
        if request.path == "/generate" and body:
            payload = orjson.loads(body)
            call = EngineCall(list(payload.get("input_ids") or []))
            self.calls[payload.get("rid", "")] = call
        async with self._http.request(
            request.method,
            f"{self.engine_url}{request.path_qs}",
            data=body,
            headers={"content-type": "application/json"},
        ) as upstream:
            if upstream.headers.get("content-type", "").startswith("text/event-stream"):
                response = web.StreamResponse(status=upstream.status, headers={"content-type": "text/event-stream"})
                await response.prepare(request)
                async for line in upstream.content:
                    if call is not None and line.startswith(b"data:") and line.strip() != b"data: [DONE]":
                        call.output_ids.extend(orjson.loads(line[5:]).get("output_ids", []))
                    await response.write(line)
                await response.write_eof()
                return response
            data = await upstream.read()
            if call is not None and upstream.status == 200:
                call.output_ids = list(orjson.loads(data).get("output_ids", []))
            return web.Response(body=data, status=upstream.status, content_type="application/json")


def token_exact_problems(store_path: str | Path, session_id: str, recorder: EngineRecorder) -> list[str]:
    """Differences between the stored calls of a session and what the engine saw; [] is conforming."""
    from roost.rollout.store.reader import TrajectoryReader

    with TrajectoryReader(store_path) as reader:
        calls = reader.calls(session_id)
    if not calls:
        return [f"session {session_id} recorded no calls"]
    problems = []
    for call in calls:
        seen = recorder.calls.get(call.call_id)
        if seen is None:
            problems.append(f"call {call.seq}: the engine never saw request {call.call_id}")
            continue
        if list(call.prompt_ids) != seen.input_ids:
            problems.append(f"call {call.seq}: stored prompt ids differ from the engine's input ids")
        if list(call.sampled_ids) != seen.output_ids:
            problems.append(f"call {call.seq}: stored sampled ids differ from the engine's output ids")
        if len(call.sampled_logprobs) != len(call.sampled_ids):
            problems.append(f"call {call.seq}: {len(call.sampled_logprobs)} logprobs for {len(call.sampled_ids)} ids")
    return problems


@dataclass
class Rig:
    """What `harness_rig` yields: the gateway (and its admin key), the env's episode host, and the
    engine recorder."""

    gateway_url: str
    admin_key: str
    store_path: Path
    host: Any
    recorder: EngineRecorder


@contextlib.asynccontextmanager
async def harness_rig(engine_url: str, env: str, env_kwargs: dict[str, Any], store_path: Path) -> AsyncIterator[Rig]:
    """A recorder in front of `engine_url`, a gateway on it, and `env` in a one-worker episode host."""
    from roost.envs.episodes import EpisodeManager, ManagerConfig
    from roost.envs.worker import WorkerConfig
    from roost.rollout.gateway.config import GatewayConfig
    from roost.rollout.gateway.launch import GatewayThread

    with EngineRecorder(engine_url) as recorder:
        gateway = GatewayThread(GatewayConfig(engine_url=recorder.url, model="tiny", store_path=store_path))
        url = await asyncio.to_thread(gateway.start)
        try:
            async with EpisodeManager(WorkerConfig(env, env_kwargs), ManagerConfig(workers=1)) as host:
                yield Rig(url, gateway.admin_key, store_path, host, recorder)
        finally:
            await asyncio.to_thread(gateway.stop)
