"""Answers to the probes agent harnesses send before they chat (hermes-agent's, first of all).

hermes-agent asks a server what it is and how long its context is, at the server's root (the
base URL without its `/v1`, so `/sessions/{sid}` for a session): LM Studio's `/api/v1/models`,
Ollama's `/api/tags` and `/api/show`, llama.cpp's `/v1/props` and `/props`, vLLM's `/version`;
OpenAI clients retrieve `/v1/models/{id}`. The gateway answers as what it is, an
OpenAI-compatible server that reports its window in `/v1/models` the way vLLM does:

    GET  {root}/version             {"version": ...}: "vLLM-like", read the window from /v1/models
    GET  {root}/v1/models/{id}      the model's card (404 for another id)
    POST {root}/api/show            the window in Ollama's shape (asked when no other probe told it)

`/api/tags`, `/api/v1/models` and `/props` stay 404: a harness that took the gateway for Ollama,
LM Studio or llama.cpp would add that server's own options to its requests.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from roost.rollout.gateway.core.auth import session_keyed
from roost.rollout.gateway.core.errors import NotFound
from roost.rollout.gateway.core.http_util import guarded
from roost.rollout.gateway.gateway import Gateway

ROOTS = ("", "/sessions/{sid}", "/sessions/{sid}/agents/{agent}")


def _json(payload: object) -> Response:
    return Response(orjson.dumps(payload), media_type="application/json")


def roost_version() -> str:
    try:
        return version("roost")
    except PackageNotFoundError:
        return "0"


def routes(gw: Gateway) -> list[Route]:
    async def server_version(request: Request) -> Response:
        return _json({"version": roost_version(), "server": "roost-gateway"})

    async def model_card(request: Request) -> Response:
        wanted = request.path_params["model"]
        cards = await gw.backend.model_cards()
        for card in cards:
            if card.get("id") == wanted:
                return _json(card)
        raise NotFound(f"no model {wanted!r} here; this gateway serves {[c.get('id') for c in cards]}", param="model")

    async def ollama_show(request: Request) -> Response:
        cards = await gw.backend.model_cards()
        window = next((c.get("max_model_len") for c in cards if c.get("max_model_len")), None)
        if window is None:
            raise NotFound("the upstream server does not report its context length")
        return _json(
            {
                "model_info": {"general.context_length": int(window)},
                "parameters": f"num_ctx {int(window)}",
                "capabilities": ["completion", "tools"],
                "details": {"format": "roost-gateway"},
            }
        )

    def probe(handler):
        return guarded("probe", gw.metrics, session_keyed(gw, handler))  # a session's roots take its key

    out = []
    for root in ROOTS:
        out.append(Route(f"{root}/version", probe(server_version), methods=["GET"]))
        out.append(Route(f"{root}/v1/models/{{model:path}}", probe(model_card), methods=["GET"]))
        out.append(Route(f"{root}/api/show", probe(ollama_show), methods=["POST"]))
    return out
