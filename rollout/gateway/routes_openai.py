"""The OpenAI endpoints, mounted at `/v1`, `/sessions/{sid}/v1` and
`/sessions/{sid}/agents/{agent}/v1`: each parses its wire's request, resolves the call's
target and hands both to the gateway's backend with the wire's front-end."""

from __future__ import annotations

import time

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .addressing import resolve_target
from .auth import session_keyed
from .backend import Front
from .chat_calls import ChatFront
from .gateway import Gateway
from .http_util import Handler, guarded, parse, read_body
from .text_calls import TextFront
from .wire import ChatCompletionRequest, CompletionRequest

PREFIXES = ("/v1", "/sessions/{sid}/v1", "/sessions/{sid}/agents/{agent}/v1")


def model_call(gw: Gateway, front: Front, model: type[BaseModel]) -> Handler:
    """The handler of a wire's model-call endpoint."""

    async def handle(request: Request) -> Response:
        received = time.perf_counter()
        body = await read_body(request, gw.config.max_body_bytes)
        req = parse(model, body)
        target = await resolve_target(request, gw.registry, gw.config.sessionless)
        return await gw.backend.call(front, target, req, body, received, request.receive)

    return handle


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
