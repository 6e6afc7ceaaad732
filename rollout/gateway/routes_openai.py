"""The OpenAI endpoints, mounted at `/v1`, `/sessions/{sid}/v1` and
`/sessions/{sid}/agents/{agent}/v1`."""

from __future__ import annotations

import time

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .addressing import resolve_target
from .auth import session_keyed
from .gateway import Gateway
from .http_util import guarded, parse, read_body
from .passthrough import template_messages
from .wire import ChatCompletionRequest, CompletionRequest

PREFIXES = ("/v1", "/sessions/{sid}/v1", "/sessions/{sid}/agents/{agent}/v1")


def routes(gw: Gateway) -> list[Route]:
    async def chat_completions(request: Request) -> Response:
        received = time.perf_counter()
        body = await read_body(request, gw.config.max_body_bytes)
        req = parse(ChatCompletionRequest, body)
        target = await resolve_target(request, gw.registry, gw.config.sessionless)
        if gw.passthrough is not None:
            messages, tools = template_messages(req)
            return await gw.passthrough.call("chat/completions", target, body, messages, tools, req.stream)
        return await _run(gw, gw.chat, request, target, req, body, received)

    async def completions(request: Request) -> Response:
        received = time.perf_counter()
        body = await read_body(request, gw.config.max_body_bytes)
        req = parse(CompletionRequest, body)
        target = await resolve_target(request, gw.registry, gw.config.sessionless)
        if gw.passthrough is not None:
            return await gw.passthrough.call("completions", target, body, None, None, req.stream)
        return await _run(gw, gw.text, request, target, req, body, received)

    async def models(request: Request) -> Response:
        if gw.passthrough is not None:
            return await gw.passthrough.models()
        ctx = gw.ctx
        card = {"id": gw.served_model, "object": "model", "created": 0, "owned_by": "roost",
                "max_model_len": ctx.context_length}
        return Response(orjson.dumps({"object": "list", "data": [card]}), media_type="application/json")

    out = []
    for prefix in PREFIXES:
        out.append(Route(f"{prefix}/chat/completions", guarded("chat", gw.metrics, chat_completions), methods=["POST"]))
        out.append(Route(f"{prefix}/completions", guarded("completions", gw.metrics, completions), methods=["POST"]))
        out.append(Route(f"{prefix}/models", guarded("models", gw.metrics, session_keyed(gw, models)), methods=["GET"]))
    return out


async def _run(gw: Gateway, calls, request: Request, target, req, body: bytes, received: float) -> Response:
    """Admit the call past the pause gate; it counts as in flight until its answer is out
    (for a stream: until the stream ends)."""
    await gw.gate.enter()
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            released = True
            gw.gate.exit()

    handed_over = False
    try:
        prepared = await calls.prepare(target, req, body, received)
        if req.stream:
            response = await calls.stream(prepared, release)
            handed_over = True
            return response
        return await calls.complete(prepared, request.receive)
    finally:
        if not handed_over:
            release()
