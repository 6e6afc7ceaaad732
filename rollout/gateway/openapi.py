"""The gateway's OpenAPI document (`GET /openapi.json`), built from the wire models.

The gateway routes with plain Starlette (no per-request validation layer), so nothing writes
this document for it: each operation below names the pydantic model that parses its body and
the model its answer follows, and the schemas come from those models. Answers of the OpenAI
endpoints (chat, completions, Responses) use the `openai` package's own types, those of the Anthropic Messages endpoints the
`anthropic` package's. `tests/rollout/test_gateway_openapi.py` checks
that every route is documented and runs schemathesis against the document.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from roost.rollout.gateway.anthropic import wire as anthropic_wire
from roost.rollout.gateway.control import wire as control_wire
from roost.rollout.gateway.openai import wire
from roost.rollout.gateway.responses import wire as responses_wire

Auth = Literal["none", "session", "admin"]
ERROR = "ErrorBody"


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    summary: str
    answer: type[BaseModel] | str | None
    """The 2xx body's model, `"text"` for plain text, `"image"` for an image's bytes, None for no
    documented body."""
    body: type[BaseModel] | None = None
    body_optional: bool = False
    status: int = 200
    streams: bool = False
    named_events: bool = False
    """Its stream's events carry an `event:` name as well as `data:` (Anthropic's do)."""
    auth: Auth = "none"
    errors: tuple[int, ...] = (400, 401, 404)
    also: tuple[int, ...] = ()
    """Other statuses whose body is the `answer` model too (a degraded /health)."""
    error_body: type[BaseModel] = wire.ErrorBody
    """The shape of its errors: OpenAI's, or Anthropic's on the Messages routes."""


OPENAI_PREFIXES = ("/v1", "/sessions/{sid}/v1", "/sessions/{sid}/agents/{agent}/v1")
PROBE_ROOTS = ("", "/sessions/{sid}", "/sessions/{sid}/agents/{agent}")


def _openai_ops(prefix: str) -> list[Operation]:
    from openai.types import Completion
    from openai.types.chat import ChatCompletion

    auth: Auth = "none" if prefix == "/v1" else "session"
    return [
        Operation(
            "post",
            f"{prefix}/chat/completions",
            "Chat completion, recorded token by token",
            ChatCompletion,
            body=wire.ChatCompletionRequest,
            streams=True,
            auth=auth,
            errors=(400, 401, 404, 409, 413, 503),
        ),
        Operation(
            "post",
            f"{prefix}/completions",
            "Text completion, recorded token by token",
            Completion,
            body=wire.CompletionRequest,
            streams=True,
            auth=auth,
            errors=(400, 401, 404, 409, 413, 503),
        ),
        Operation("get", f"{prefix}/models", "The served model", wire.ModelList, auth=auth, errors=(401, 404)),
    ]


def _messages_ops(prefix: str) -> list[Operation]:
    from anthropic.types import Message, MessageTokensCount

    auth: Auth = "none" if prefix == "/v1" else "session"
    errors = (400, 401, 404, 409, 413)
    return [
        Operation(
            "post",
            f"{prefix}/messages",
            "Anthropic Messages call, recorded token by token",
            Message,
            body=anthropic_wire.MessagesRequest,
            streams=True,
            named_events=True,
            auth=auth,
            errors=(*errors, 503),
            error_body=anthropic_wire.AnthropicErrorBody,
        ),
        Operation(
            "post",
            f"{prefix}/messages/count_tokens",
            "The prompt tokens a Messages call would take",
            MessageTokensCount,
            body=anthropic_wire.CountTokensRequest,
            auth=auth,
            errors=errors,
            error_body=anthropic_wire.AnthropicErrorBody,
        ),
    ]


def _responses_ops(prefix: str) -> list[Operation]:
    from openai.types.responses import Response

    auth: Auth = "none" if prefix == "/v1" else "session"
    return [
        Operation(
            "post",
            f"{prefix}/responses",
            "OpenAI Responses call, recorded token by token",
            Response,
            body=responses_wire.ResponsesRequest,
            streams=True,
            named_events=True,
            auth=auth,
            errors=(400, 401, 404, 409, 413, 503),
        ),
        Operation(
            "get",
            f"{prefix}/responses/{{response_id}}",
            "A stored response of the caller's session",
            Response,
            auth=auth,
            errors=(401, 404),
        ),
    ]


def _probe_ops(root: str) -> list[Operation]:
    auth: Auth = "none" if root == "" else "session"
    return [
        Operation(
            "get",
            f"{root}/version",
            "What server this is (harness probes)",
            control_wire.ServerVersion,
            auth=auth,
            errors=(401, 404),
        ),
        Operation(
            "get", f"{root}/v1/models/{{model}}", "One model's card", wire.ModelCard, auth=auth, errors=(401, 404)
        ),
        Operation(
            "post",
            f"{root}/api/show",
            "The context window in Ollama's shape",
            control_wire.OllamaShow,
            auth=auth,
            errors=(401, 404),
        ),
    ]


def _engine_ops() -> list[Operation]:
    return [
        Operation(
            "get",
            "/admin/engines",
            "The engines behind the gateway: state, load, weight version",
            control_wire.EngineList,
            auth="admin",
            errors=(401, 409),
        ),
        Operation(
            "post",
            "/admin/engines",
            "Add an engine of the gateway's model (400 when it serves another)",
            control_wire.EngineView,
            body=control_wire.AddEngine,
            status=201,
            auth="admin",
            errors=(400, 401, 409, 413),
        ),
        Operation(
            "delete",
            "/admin/engines/{engine_id}",
            "Remove an engine; its sessions move on their next call",
            control_wire.EngineView,
            auth="admin",
            errors=(401, 404, 409),
        ),
        Operation(
            "post",
            "/admin/weight_version",
            "Weight-sync barrier: engines not at this version leave rotation (stale)",
            control_wire.EngineList,
            body=control_wire.SetWeightVersion,
            auth="admin",
            errors=(400, 401, 409, 413),
        ),
    ]


def _control_ops() -> list[Operation]:
    return [
        Operation(
            "post",
            "/sessions",
            "Create a session",
            control_wire.SessionCreated,
            body=control_wire.CreateSession,
            body_optional=True,
            status=201,
            auth="admin",
            errors=(400, 401, 409, 413),
        ),
        Operation(
            "get",
            "/sessions",
            "List sessions (filter by group, status)",
            control_wire.SessionList,
            auth="admin",
            errors=(400, 401),
        ),
        Operation(
            "get",
            "/sessions/{sid}",
            "A session with its agents, calls and rewards",
            control_wire.SessionDetail,
            auth="admin",
        ),
        Operation(
            "get",
            "/samples",
            "The training samples of groups' sessions, paged (group=, limit=, cursor=)",
            control_wire.SamplesPage,
            auth="admin",
            errors=(400, 401),
        ),
        Operation(
            "post",
            "/sessions/{sid}/reward",
            "Reward a session, an agent or a call",
            control_wire.Ack,
            body=control_wire.PostReward,
            auth="admin",
            errors=(400, 401, 404, 413),
        ),
        Operation(
            "post",
            "/sessions/{sid}/advantages",
            "Advantages per call or per sampled token",
            control_wire.AdvantagesAck,
            body=control_wire.PostAdvantages,
            auth="admin",
            errors=(400, 401, 404, 413),
        ),
        Operation(
            "post",
            "/sessions/{sid}/finish",
            "Finish a session; it takes no more calls",
            control_wire.SessionSummary,
            body=control_wire.FinishSession,
            body_optional=True,
            auth="admin",
            errors=(400, 401, 404, 413),
        ),
        Operation(
            "post",
            "/admin/pause",
            "Stop admitting calls; wait (bounded) for in-flight ones",
            control_wire.PauseState,
            body=control_wire.PauseRequest,
            body_optional=True,
            auth="admin",
            errors=(400, 401, 413),
        ),
        Operation("post", "/admin/resume", "Admit calls again", control_wire.PauseState, auth="admin", errors=(401,)),
        Operation(
            "get",
            "/images/{sha256}",
            "An image calls carried, by the sha256 of its bytes (as stored: once)",
            "image",
            auth="admin",
            errors=(400, 401, 404),
        ),
        *_engine_ops(),
        Operation(
            "get",
            "/health",
            "Liveness; 503 while the engine does not answer",
            control_wire.GatewayHealth,
            errors=(),
            also=(503,),
        ),
        Operation("get", "/metrics", "Prometheus metrics", "text", errors=()),
        Operation("get", "/openapi.json", "This document", None, errors=()),
    ]


def operations() -> list[Operation]:
    ops = _control_ops()
    for prefix in OPENAI_PREFIXES:
        ops += _openai_ops(prefix) + _messages_ops(prefix) + _responses_ops(prefix)
    for root in PROBE_ROOTS:
        ops += _probe_ops(root)
    return ops


class _Schemas:
    """Collects component schemas; models from the `openai` and `anthropic` packages are
    prefixed so their names (FunctionCall, TextBlock, ...) cannot collide with the gateway's own."""

    def __init__(self) -> None:
        self.components: dict[str, Any] = {}

    def ref(self, model: type[BaseModel]) -> dict[str, str]:
        package = model.__module__.split(".")[0]
        prefix = {"openai": "OpenAI", "anthropic": "Anthropic"}.get(package, "")
        name = prefix + model.__name__
        if name not in self.components:
            schema = model.model_json_schema(ref_template=f"#/components/schemas/{prefix}{{model}}")
            for def_name, definition in schema.pop("$defs", {}).items():
                self.components.setdefault(prefix + def_name, definition)
            self.components[name] = schema
        return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


# A server-sent event as schemathesis reads one: OpenAI's wires send `data:` lines only (the
# event type defaults to "message"); Anthropic's and Responses' name each event.
_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
}
_NAMED_EVENT = {**_EVENT, "required": ["event", "data"]}


def _answer(op: Operation, schemas: _Schemas) -> dict[str, Any]:
    if op.answer is None:
        return {"description": "OK"}
    if op.answer == "text":
        return {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}
    if op.answer == "image":
        return {"description": "OK", "content": {"image/*": {"schema": {"type": "string", "format": "binary"}}}}
    content = _json(schemas.ref(op.answer))
    if op.streams:
        content["text/event-stream"] = {"schema": _NAMED_EVENT if op.named_events else _EVENT}
    return {"description": "OK", "content": content}


def _operation(op: Operation, schemas: _Schemas) -> dict[str, Any]:
    out: dict[str, Any] = {"summary": op.summary, "operationId": f"{op.method}:{op.path}"}
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in ("sid", "agent", "model", "engine_id", "sha256")
        if f"{{{name}}}" in op.path
    ]
    if params:
        out["parameters"] = params
    if op.body is not None:
        out["requestBody"] = {"required": not op.body_optional, "content": _json(schemas.ref(op.body))}
    responses = {str(status): _answer(op, schemas) for status in (op.status, *op.also)}
    for status in op.errors:
        responses[str(status)] = {"description": "An error", "content": _json(schemas.ref(op.error_body))}
    out["responses"] = responses
    if op.auth != "none":
        out["security"] = [{"sessionKey": []}, {"sessionApiKey": []}] if op.auth == "session" else [{"adminKey": []}]
    return out


def build_openapi(version: str) -> dict[str, Any]:
    """The whole document; `version` is roost's."""
    schemas = _Schemas()
    paths: dict[str, dict[str, Any]] = {}
    for op in operations():
        paths.setdefault(op.path, {})[op.method] = _operation(op, schemas)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "roost gateway",
            "version": version,
            "description": "OpenAI-compatible gateway that records every call token by token, and its "
            'control plane. Errors are OpenAI-shaped, {"error": {message, type, code, param}}, and '
            'Anthropic-shaped on the Messages routes, {"type": "error", "error": '
            "{type, message}}.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas.components,
            "securitySchemes": {
                "sessionKey": {"type": "http", "scheme": "bearer", "description": "The session's key"},
                "sessionApiKey": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "x-api-key",
                    "description": "The session's key, as Anthropic clients send it",
                },
                "adminKey": {"type": "http", "scheme": "bearer", "description": "The gateway's admin key"},
            },
        },
    }
