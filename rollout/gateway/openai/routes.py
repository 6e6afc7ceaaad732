"""The OpenAI endpoints, mounted at `/v1`, `/sessions/{sid}/v1` and
`/sessions/{sid}/agents/{agent}/v1`: each parses its wire's request, resolves the call's
target and hands both to the gateway's backend with the wire's front-end."""

from __future__ import annotations

import time

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from roost.rollout.gateway.core.addressing import resolve_target
from roost.rollout.gateway.core.auth import session_keyed
from roost.rollout.gateway.core.backend import Front
from roost.rollout.gateway.core.http_util import Handler, guarded, parse, read_body
from roost.rollout.gateway.core.recording import CallTarget
from roost.rollout.gateway.gateway import Gateway
from roost.rollout.gateway.openai.chat_calls import ChatFront
from roost.rollout.gateway.openai.text_calls import TextFront
from roost.rollout.gateway.openai.wire import ChatCompletionRequest, CompletionRequest
from roost.tracing import Tracing

PREFIXES = ("/v1", "/sessions/{sid}/v1", "/sessions/{sid}/agents/{agent}/v1")
# The URLs of model calls (every wire), which `call_span` traces instead of the ASGI middleware.
MODEL_CALL_PATHS = "/v1/(chat/completions|completions|messages|responses)$"


def model_call(gw: Gateway, front: Front, model: type[BaseModel]) -> Handler:
    """The handler of a wire's model-call endpoint."""

    async def handle(request: Request) -> Response:
        received = time.perf_counter()
        body = await read_body(request, gw.config.max_body_bytes)
        req = parse(model, body)
        target = await resolve_target(request, gw.registry, gw.config.sessionless)
        with call_span(gw.tracing, request, target, front.endpoint):
            return await gw.backend.call(front, target, req, body, received, request.receive)

    return handle


def call_span(tracing: Tracing, request: Request, target: CallTarget, endpoint: str):
    """The `gateway.call` span of one model call: a child of the traceparent the harness sent
    (linked to the session's episode), else of the session's episode, else a trace's root."""
    sent = tracing.incoming(request.headers)
    episode = target.session.trace_parent
    attributes = {
        "roost.session_id": target.session.session_id,
        "roost.agent": target.agent,
        "roost.endpoint": endpoint,
        "http.request.method": request.method,
        "url.path": request.url.path,
    }
    return tracing.span("gateway.call", attributes, parent=sent or episode, link=episode if sent else None, server=True)


def routes(gw: Gateway) -> list[Route]:
    async def models(request: Request) -> Response:
        return await gw.backend.models()

    chat = model_call(gw, ChatFront(), ChatCompletionRequest)
    text = model_call(gw, TextFront(), CompletionRequest)
    out = []
    for prefix in PREFIXES:
        out.append(Route(f"{prefix}/chat/completions", guarded("chat", gw.metrics, chat), methods=["POST"]))
        out.append(Route(f"{prefix}/completions", guarded("completions", gw.metrics, text), methods=["POST"]))
        out.append(Route(f"{prefix}/models", guarded("models", gw.metrics, session_keyed(gw, models)), methods=["GET"]))
    return out
