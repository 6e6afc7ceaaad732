"""Reading request bodies and turning errors into OpenAI-shaped responses."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from roost.rollout.gateway.core.errors import (
    BodyTooLarge,
    ClientDisconnected,
    GatewayError,
    InvalidRequest,
    anthropic_body,
)
from roost.rollout.gateway.core.metrics import GatewayMetrics
from roost.serving.body import BodyOverLimit, read_limited
from roost.serving.json_bounds import out_of_bounds

log = logging.getLogger("roost.gateway")
M = TypeVar("M", bound=BaseModel)
Handler = Callable[[Request], Awaitable[Response]]


async def read_body(request: Request, limit: int) -> bytes:
    """The body within `limit` bytes (`roost.serving.body`), its refusal the gateway's errors."""
    try:
        return await read_limited(request, limit)
    except BodyOverLimit as exc:
        size = f"of {exc.declared} bytes " if exc.declared else ""
        raise BodyTooLarge(f"request body {size}exceeds the gateway's {limit}-byte limit") from None
    except ClientDisconnect:
        raise ClientDisconnected("the client disconnected while sending the request body") from None


def parse(model: type[M], body: bytes) -> M:
    if not body.strip():
        raise InvalidRequest("the request body is empty; send a JSON object", code="invalid_json")
    try:
        request = model.model_validate_json(body)
    except ValidationError as exc:
        raise validation_error(exc) from None
    problem = out_of_bounds(request, body)
    if problem is not None:
        where, what = problem
        raise InvalidRequest(f"invalid request: {where}: {what}", param=where)
    return request


def validation_error(exc: ValidationError) -> InvalidRequest:
    errors = exc.errors(include_url=False)
    if any(e["type"] == "json_invalid" for e in errors):
        detail = next(e for e in errors if e["type"] == "json_invalid").get("ctx", {}).get("error", "")
        return InvalidRequest(f"malformed JSON in the request body ({detail}); send a JSON object", code="invalid_json")
    parts, param = [], None
    for e in errors[:6]:
        where = ".".join(str(x) for x in e["loc"]) or "body"
        param = param or where
        if e["type"] == "missing":
            parts.append(f"{where} is required")
        elif e["type"] == "extra_forbidden":
            parts.append(f"{where} is not a field this gateway knows; remove it")
        elif e["type"] == "model_type" and not e["loc"]:
            parts.append("the body must be a JSON object")
        else:
            parts.append(f"{where}: {e['msg']}")
    return InvalidRequest("invalid request: " + "; ".join(parts), param=param)


def error_response(error: GatewayError) -> Response:
    return Response(error.body(), status_code=error.status, media_type="application/json", headers=error.headers())


def anthropic_error_response(error: GatewayError) -> Response:
    return Response(
        anthropic_body(error), status_code=error.status, media_type="application/json", headers=error.headers()
    )


def guarded(
    endpoint: str,
    metrics: GatewayMetrics,
    handler: Handler,
    respond: Callable[[GatewayError], Response] = error_response,
) -> Handler:
    """Run `handler`, answering every failure in its wire's shape (`respond`: OpenAI's by
    default) and counting the status."""

    async def run(request: Request) -> Response:
        try:
            response = await handler(request)
        except GatewayError as error:
            response = respond(error)
        except Exception:
            log.exception("unhandled error on %s", endpoint)
            response = respond(
                GatewayError("the gateway failed on this request (a bug: see its log); other sessions are unaffected")
            )
        metrics.requests.labels(endpoint, str(response.status_code)).inc()
        return response

    return run
