"""The OpenAI Responses endpoints under the same prefixes as the others: `POST /responses`
serves a call; `GET /responses/{id}` reads back a stored answer of the caller's session
(the one its path or key names; the anonymous session's on a plain `/v1` without a key)."""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from roost.rollout.gateway.anthropic.messages import ThinkingSigner
from roost.rollout.gateway.core.addressing import resolve_session
from roost.rollout.gateway.core.errors import NotFound
from roost.rollout.gateway.core.http_util import guarded
from roost.rollout.gateway.gateway import Gateway
from roost.rollout.gateway.openai.routes import PREFIXES, model_call
from roost.rollout.gateway.responses.calls import ResponsesFront, public, stored_response
from roost.rollout.gateway.responses.wire import ResponsesRequest


def routes(gw: Gateway) -> list[Route]:
    # The same key as the Messages routes': reasoning signed on one wire is accepted on the other.
    front = ResponsesFront(ThinkingSigner(gw.config.admin_key))

    async def get(request: Request) -> Response:
        state = await resolve_session(request, gw.registry, gw.config.sessionless)
        rid = request.path_params["response_id"]
        stored = await gw.store.read(lambda r: stored_response(r, rid, state.session_id))
        if stored is None:
            raise NotFound(
                f"no stored response {rid!r} in session {state.session_id!r}; responses made with "
                "store=false, or in another session, are not served",
                param="response_id",
            )
        return Response(orjson.dumps(public(stored)), media_type="application/json")

    create = guarded("responses", gw.metrics, model_call(gw, front, ResponsesRequest))
    read = guarded("responses_get", gw.metrics, get)
    out = []
    for prefix in PREFIXES:
        out.append(Route(f"{prefix}/responses", create, methods=["POST"]))
        out.append(Route(f"{prefix}/responses/{{response_id}}", read, methods=["GET"]))
    return out
