"""The gateway's ASGI app (Starlette: routing without per-request validation layers,
which the hot path does itself with pydantic-core)."""

from __future__ import annotations

from contextlib import asynccontextmanager

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from roost.rollout.gateway.anthropic import routes as routes_messages
from roost.rollout.gateway.config import GatewayConfig
from roost.rollout.gateway.control import engines as routes_engines
from roost.rollout.gateway.control import probes as routes_probes
from roost.rollout.gateway.control import routes as routes_control
from roost.rollout.gateway.control.probes import roost_version
from roost.rollout.gateway.core.errors import MethodNotAllowed, NotFound
from roost.rollout.gateway.core.http_util import error_response, guarded
from roost.rollout.gateway.gateway import Gateway
from roost.rollout.gateway.openai import routes as routes_openai
from roost.rollout.gateway.openai.routes import MODEL_CALL_PATHS
from roost.rollout.gateway.openapi import build_openapi
from roost.rollout.gateway.responses import routes as routes_responses


def create_app(config: GatewayConfig, gateway: Gateway | None = None) -> Starlette:
    gw = gateway or Gateway(config)

    @asynccontextmanager
    async def lifespan(app: Starlette):
        await gw.start()
        try:
            yield
        finally:
            await gw.stop()

    async def http_error(request: Request, exc: HTTPException) -> Response:
        if exc.status_code == 405:
            return error_response(MethodNotAllowed(f"{request.method} is not allowed on {request.url.path}"))
        return error_response(
            NotFound(
                f"no endpoint {request.method} {request.url.path}; the gateway serves /v1/chat/completions, "
                "/v1/completions, /v1/messages, /v1/messages/count_tokens, /v1/responses, /v1/models "
                "(also under /sessions/{id}/v1 and /sessions/{id}/agents/{agent}/v1) "
                "and the control plane (/sessions, /admin, /health, /metrics); /openapi.json lists every route"
            )
        )

    document = orjson.dumps(build_openapi(roost_version()))

    async def openapi(request: Request) -> Response:
        return Response(document, media_type="application/json")

    app = Starlette(
        routes=routes_openai.routes(gw)
        + routes_messages.routes(gw)
        + routes_responses.routes(gw)
        + routes_control.routes(gw)
        + routes_engines.routes(gw)
        + routes_probes.routes(gw)
        + [Route("/openapi.json", guarded("openapi", gw.metrics, openapi), methods=["GET"])],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    app.state.gateway = gw
    # Model calls get their own server span (openai/routes.call_span), parented on the session's
    # episode when the harness sends no traceparent.
    return gw.tracing.instrument_app(app, untraced=MODEL_CALL_PATHS)
