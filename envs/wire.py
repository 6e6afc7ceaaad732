"""HTTP wire types of the env server. Shared by server and client; unknown fields are rejected.

    POST   /episodes                 ResetRequest  → EpisodeCreated
    POST   /episodes/{id}/step       StepRequest   → StepResponse
    GET    /episodes/{id}                          → EpisodeView
    DELETE /episodes/{id}                          → EpisodeView
    GET    /tasks?split=                           → TaskList
    GET    /info                                   → EnvInfoResponse
    GET    /health                                 → Health (503 while degraded)
    GET    /metrics                                → Prometheus text
Errors: `{"error": {"type": <EnvError.code>, "message": ...}}`; an environment fault is a
5xx whose type is `env_error`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from roost.envs import protocol
from roost.envs.errors import InvalidActionError


class Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ObservationWire(Wire):
    text: str
    image: str | None = None
    accessibility_tree: str | None = None

    @classmethod
    def of(cls, obs: protocol.Observation) -> ObservationWire:
        return cls(text=obs.text, image=obs.image, accessibility_tree=obs.accessibility_tree)

    def to_protocol(self) -> protocol.Observation:
        return protocol.Observation(self.text, self.image, self.accessibility_tree)


class ResetRequest(Wire):
    task_id: str | None = Field(None, max_length=1024)
    seed: int | None = None
    split: str | None = Field(None, max_length=64)
    options: dict[str, Any] = Field(default_factory=dict)


class TextActionWire(Wire):
    type: Literal["text"] = "text"
    text: str = Field(max_length=65536)


class ToolCallWire(Wire):
    type: Literal["tool_call"] = "tool_call"
    name: str = Field(max_length=256)
    arguments: str | dict[str, Any] = Field(default="{}", description="JSON text, as OpenAI returns it, or an object.")
    id: str | None = None


ActionWire = Annotated[TextActionWire | ToolCallWire, Field(discriminator="type")]


AGENT_FIELDS = frozenset({"text", "name", "arguments", "id"})
"""The fields of an action that a model wrote: past their limits the action is invalid (422
`invalid_action`, scored as the env scores invalid actions); anything else wrong with a step
body is the client's error (422 `bad_request`)."""


class StepRequest(Wire):
    action: ActionWire

    @classmethod
    def of_body(cls, body: Any) -> StepRequest:
        """Validate a parsed step body; `InvalidActionError` where only `AGENT_FIELDS` are wrong,
        else pydantic's `ValidationError`."""
        try:
            return cls.model_validate(body)
        except ValidationError as exc:
            found = exc.errors(include_url=False)
            if all(len(e["loc"]) > 2 and e["loc"][0] == "action" and e["loc"][2] in AGENT_FIELDS for e in found):
                raise InvalidActionError(f"invalid action: {problems(found)}") from None
            raise

    @classmethod
    def of(cls, action: protocol.Action) -> StepRequest:
        """The wire form of an action; `InvalidActionError` where it is past the wire's limits."""
        if isinstance(action, protocol.TextAction):
            return cls.of_body({"action": {"type": "text", "text": action.text}})
        return cls.of_body(
            {"action": {"type": "tool_call", "name": action.name, "arguments": action.arguments, "id": action.id}}
        )

    def to_protocol(self) -> protocol.Action:
        a = self.action
        if isinstance(a, TextActionWire):
            return protocol.TextAction(a.text)
        return protocol.ToolCall(a.name, a.arguments, a.id)


class EpisodeCreated(Wire):
    episode_id: str
    task_id: str
    observation: ObservationWire
    tools: list[dict[str, Any]]
    info: dict[str, Any]


class StepResponse(Wire):
    episode_id: str
    observation: ObservationWire
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    tools: list[dict[str, Any]] | None = None


EpisodeState = Literal["running", "terminated", "truncated", "failed", "closed", "reaped"]


class EpisodeView(Wire):
    episode_id: str
    task_id: str
    state: EpisodeState
    steps: int
    total_reward: float
    created_at: float
    last_active_at: float
    lease_expires_at: float | None
    error: str | None = None


class TaskWire(Wire):
    id: str
    split: str
    metadata: dict[str, Any] = Field(default_factory=dict)


class TaskList(Wire):
    split: str
    tasks: list[TaskWire]


class EnvInfoResponse(Wire):
    name: str
    version: str
    description: str
    tools: list[dict[str, Any]]
    splits: list[str]
    max_episodes: int
    lease_s: float
    versions: dict[str, str] = {}
    """The software the env runs, by name → version (OSWorld: its desktops' applications)."""


class WorkerCount(Wire):
    alive: int
    """Workers that loaded the env and run."""
    wanted: int
    """Workers the server was started with."""


class Health(Wire):
    status: Literal["ok", "degraded"]
    """degraded (HTTP 503) while fewer workers serve than wanted; episodes still run on the others."""
    live_episodes: int
    workers: WorkerCount


def problems(found: list[Any]) -> str:
    """Pydantic's errors (`ValidationError.errors()`) as one line: `where: what; ...`."""
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in found[:5])


class ErrorDetail(Wire):
    type: str
    message: str


class ErrorBody(Wire):
    error: ErrorDetail


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """`model`'s JSON schema with its `$defs` written in place, for an OpenAPI document that
    does not hold them (the models here do not nest recursively)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return inline(defs[ref.removeprefix("#/$defs/")])
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    inlined: dict[str, Any] = inline(schema)
    return inlined
