"""Gateway errors, each an OpenAI-shaped body with the right HTTP status.

Every message says what happened and what to do about it; `type` and `code` follow the
values OpenAI uses where OpenAI has one, so clients map them to their own exceptions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from roost.rollout.engine_api.sglang_client import EngineError, EngineProtocolError, EngineRejected
from roost.rollout.gateway.control.wire import WORKER_UNAVAILABLE

if TYPE_CHECKING:
    from roost.rollout.gateway.core.metrics import GatewayMetrics


class GatewayError(Exception):
    status = 500
    type = "server_error"
    code = "internal_error"

    def __init__(
        self, message: str, *, param: str | None = None, retry_after_s: int | None = None, code: str | None = None
    ):
        super().__init__(message)
        self.message = message
        self.param = param
        self.retry_after_s = retry_after_s
        if code is not None:
            self.code = code

    def body(self) -> bytes:
        return orjson.dumps(
            {"error": {"message": self.message, "type": self.type, "code": self.code, "param": self.param}}
        )

    def headers(self) -> dict[str, str]:
        if self.retry_after_s is None:
            return {}
        return {"Retry-After": str(self.retry_after_s)}


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class ContextLengthExceeded(InvalidRequest):
    code = "context_length_exceeded"


class BodyTooLarge(InvalidRequest):
    status = 413
    code = "request_too_large"


class ModelNotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class SessionNotFound(NotFound):
    code = "session_not_found"


class Unauthorized(GatewayError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer"}


class InvalidSessionKey(Unauthorized):
    """A session's path without that session's key, or a session key that matches no session."""


class InvalidAdminKey(Unauthorized):
    """The control plane without the gateway's admin key."""


class SessionFinished(GatewayError):
    status = 409
    type = "invalid_request_error"
    code = "session_finished"


class Conflict(GatewayError):
    status = 409
    type = "invalid_request_error"
    code = "conflict"


class MethodNotAllowed(GatewayError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class ClientDisconnected(GatewayError):
    """The client left before its answer was ready (status 499, as nginx logs it; no one reads it)."""

    status = 499
    type = "invalid_request_error"
    code = "client_disconnected"


class BackendUnavailable(GatewayError):
    """The engine is down, slow, or answered something unusable: retry later; the session is kept."""

    status = 503
    type = "service_unavailable"
    code = "engine_unavailable"

    def __init__(self, message: str, *, retry_after_s: int = 2, code: str | None = None):
        super().__init__(message, retry_after_s=retry_after_s, code=code)


class GatewayPaused(BackendUnavailable):
    code = "gateway_paused"


class WorkerUnavailable(BackendUnavailable):
    """The gateway worker that serves a session (`roost gateway --workers N`) is starting again,
    or the control plane waits for every worker to be up: nothing was applied; retry."""

    code = WORKER_UNAVAILABLE


class StoreUnavailable(GatewayError):
    status = 503
    type = "service_unavailable"
    code = "store_unavailable"

    def __init__(self, message: str):
        super().__init__(message, retry_after_s=5)


# Anthropic's error types by HTTP status (its SDK maps statuses, not types, to exceptions).
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def anthropic_body(error: GatewayError) -> bytes:
    """The error in Anthropic's shape, `{"type": "error", "error": {"type", "message"}}`."""
    kind = _ANTHROPIC_TYPES.get(error.status, "api_error")
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": error.message}})


def engine_failure(exc: EngineError, metrics: GatewayMetrics, retry_after_s: int) -> GatewayError:
    """Map an engine error to the gateway's answer; the session is untouched either way."""
    if isinstance(exc, EngineRejected):
        metrics.engine_errors.labels("engine_rejected").inc()
        return InvalidRequest(f"the engine refused this request: {exc}", code="engine_rejected")
    if isinstance(exc, EngineProtocolError):
        metrics.engine_errors.labels("engine_protocol_error").inc()
        return BackendUnavailable(
            f"the engine answered something that is not an SGLang /generate answer ({exc}); "
            "check that --engine-url points at an SGLang-API engine; the session is kept, retry",
            retry_after_s=retry_after_s,
            code="engine_protocol_error",
        )
    metrics.engine_errors.labels("engine_unavailable").inc()
    return BackendUnavailable(
        f"the engine is unavailable ({exc}); the session is kept, retry after a moment",
        retry_after_s=retry_after_s,
    )
