"""The Anthropic Messages endpoints under the same prefixes as the OpenAI ones (`/v1`,
`/sessions/{sid}/v1`, `/sessions/{sid}/agents/{agent}/v1`), so `ANTHROPIC_BASE_URL` set to a
session's URL and `ANTHROPIC_API_KEY` to its key (sent as `x-api-key`) is all a harness needs.
Errors here are Anthropic-shaped."""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from roost.rollout.gateway.anthropic.calls import MessagesFront
from roost.rollout.gateway.anthropic.messages import ThinkingSigner
from roost.rollout.gateway.anthropic.wire import CountTokensRequest, MessagesRequest
from roost.rollout.gateway.core.addressing import resolve_target
from roost.rollout.gateway.core.http_util import Handler, anthropic_error_response, guarded, parse, read_body
from roost.rollout.gateway.gateway import Gateway
from roost.rollout.gateway.openai.routes import PREFIXES, model_call


def routes(gw: Gateway) -> list[Route]:
    # Signed with a key derived from the admin key: signatures outlive a restart given the same key.
    front = MessagesFront(ThinkingSigner(gw.config.admin_key))

    async def count_tokens(request: Request) -> Response:
        body = await read_body(request, gw.config.max_body_bytes)
        req = parse(CountTokensRequest, body)
        target = await resolve_target(request, gw.registry, gw.config.sessionless)
        count = await gw.backend.count_tokens(front, target, req, body)
        return Response(orjson.dumps({"input_tokens": count}), media_type="application/json")

    def wire(endpoint: str, handler: Handler) -> Handler:
        return guarded(endpoint, gw.metrics, handler, respond=anthropic_error_response)

    messages = wire("messages", model_call(gw, front, MessagesRequest))
    counting = wire("count_tokens", count_tokens)
    out = []
    for prefix in PREFIXES:
        out.append(Route(f"{prefix}/messages", messages, methods=["POST"]))
        out.append(Route(f"{prefix}/messages/count_tokens", counting, methods=["POST"]))
    return out
