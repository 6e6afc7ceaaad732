"""OpenAI wire types the gateway accepts (requests), and the control plane's bodies and answers.

Both ends use the control-plane models: the gateway parses and answers with them, and its
clients (`roost.agents.gateway_session`) send and read them; so this module imports nothing
of the server.

Unknown fields are rejected with a 400 naming them, so a typo'd sampling parameter cannot
silently change nothing; only a tool of a type that is not a function is accepted (and left
out, with a note). Fields OpenAI defines that roost cannot honour are accepted only
where ignoring them is harmless (`user`, `store`, `metadata`, ...); the rest are refused in
`sampling_params.py` with a message saying so.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator

from roost.outcome import EpisodeOutcome, SessionStatus

SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


class Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Lenient(BaseModel):
    """A part of a request that harnesses grow faster than this gateway learns (Claude Code's and
    Codex's top level, hosted tools, new item types): fields it does not know are kept
    (`model_extra`) and noted with the call (request_notes.py) instead of refused."""

    model_config = ConfigDict(extra="allow")


def tagged(known: tuple[str, ...], default: str | None) -> Discriminator:
    """A union's discriminator: the value's `type` (`default` where it has none) where that is
    one of `known`, else `other`, the tag of the union's `Lenient` member."""

    def tag(value: Any) -> str:
        kind = value.get("type", default) if isinstance(value, dict) else getattr(value, "type", default)
        return str(kind) if kind in known else "other"

    return Discriminator(tag)


class FunctionCall(Wire):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCall(Wire):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall
    index: int | None = None  # some clients echo the streaming index back


class ChatMessage(Wire):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None  # the field name some clients use for reasoning_content
    refusal: str | None = None
    function_call: dict[str, Any] | None = None
    audio: dict[str, Any] | None = None
    annotations: list[Any] | None = None
    provider_specific_fields: dict[str, Any] | None = None  # litellm echoes this back


class ToolFunction(Wire):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(Wire):
    type: Literal["function"] = "function"
    function: ToolFunction


class OtherTool(Lenient):
    """A tool that is not a function (`custom`, or a type of a newer API): not offered to the
    model, noted with the call."""

    type: str




class StreamOptions(Wire):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class JsonSchemaFormat(Wire):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(Wire):
    """OpenAI's `response_format`; json_object and json_schema are enforced by the engine's grammar."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class SamplingFields(Wire):
    """Sampling fields shared by chat and text completions (OpenAI names, plus the
    SGLang/vLLM extensions harnesses pass through `extra_body`)."""

    model: str
    max_tokens: int | None = Field(None, ge=0)
    temperature: float | None = Field(None, ge=0.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    n: int = Field(1, ge=1, le=64)
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: Any = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    # Extensions (SGLang / vLLM names).
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: int | None = Field(None, ge=0)
    ignore_eos: bool | None = None
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool | None = None
    return_token_ids: bool = False
    allowed_replies: list[str] | None = None
    """roost's extension: the reply must be exactly one of these (e.g. an env's admissible actions)."""
    # Scripted-sampler control for tests and benchmarks (embedded engine only).
    custom_params: dict[str, Any] | None = None


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage]
    tools: list[Annotated[Annotated[Tool, Tag("function")] | Annotated[OtherTool, Tag("other")],
                          tagged(("function",), "function")]] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_completion_tokens: int | None = Field(None, ge=0)
    top_logprobs: int | None = Field(None, ge=0, le=20)
    response_format: ResponseFormat | None = None
    reasoning_effort: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    store: bool | None = None
    service_tier: str | None = None
    modalities: list[str] | None = None
    functions: list[dict[str, Any]] | None = None
    function_call: Any = None


class CompletionRequest(SamplingFields):
    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None


class CreateSession(Wire):
    """`POST /sessions`."""

    group_id: str | None = Field(None, description="Group (e.g. GRPO group / training step) the session belongs to")
    task: dict[str, Any] = Field(default_factory=dict, description="Task metadata (id, split, env, seed, ...)")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Anything else to keep with the session")
    session_id: str | None = Field(None, description="Choose the id (default: random)")
    reasoning_policy: Literal["keep", "drop"] | None = Field(None, description="Override the gateway's policy")
    traceparent: str | None = Field(None, max_length=128, description=(
        "W3C traceparent of the episode's span (tracing on): the session's model calls that bring no "
        "traceparent of their own are its children (default: this request's own traceparent)"))

    @field_validator("session_id")
    @classmethod
    def _plain_token(cls, sid: str | None) -> str | None:
        # The id becomes a path segment of the session's base_url: `.`, `..`, `/` or `%2e` there
        # would be normalised by clients into another path (`/sessions/../v1` is `/v1`).
        if sid is not None and not SESSION_ID.fullmatch(sid):
            raise ValueError("must be 1-128 letters, digits, '_' or '-', starting with a letter or digit "
                             "(it is a path segment of the session's base_url); choose another or omit it")
        return sid


class PostReward(Wire):
    """`POST /sessions/{sid}/reward`: to the session, or to one agent, or to one call."""

    reward: float
    agent: str | None = None
    call_id: str | None = None
    info: dict[str, Any] = Field(default_factory=dict)


class CallAdvantage(Wire):
    call_id: str
    advantage: float | list[float]


class PostAdvantages(Wire):
    """`POST /sessions/{sid}/advantages`: a scalar per call, or one value per sampled token."""

    advantages: list[CallAdvantage]


class FinishSession(Wire):
    """`POST /sessions/{sid}/finish`."""

    outcome: EpisodeOutcome | None = Field(None, description="how the episode ended: status, reward, kind, reason")
    info: dict[str, Any] = Field(default_factory=dict, description="anything else about the episode, for people "
                                 "(task id, steps, stop reason); without `outcome`, read for its `status` and `reward`")


class PauseRequest(Wire):
    """`POST /admin/pause`: stop admitting calls; wait (bounded) for in-flight ones to finish."""

    drain_timeout_s: float = Field(60.0, ge=0.0)


class ErrorDetail(BaseModel):
    message: str
    type: str
    code: str | int | None = None
    param: str | None = None


class ErrorBody(Wire):
    """Every gateway error, OpenAI-shaped."""

    error: ErrorDetail


class ModelCard(Wire):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str
    max_model_len: int | None = None


class ModelList(Wire):
    """`GET /v1/models`."""

    object: Literal["list"] = "list"
    data: list[ModelCard]


class ServerVersion(Wire):
    version: str
    server: str


class OllamaShow(Wire):
    model_info: dict[str, int]
    parameters: str
    capabilities: list[str]
    details: dict[str, str]


class SessionCreated(Wire):
    """The answer to `POST /sessions`: `base_url` goes to the harness, `key` is its API key."""

    session_id: str
    key: str
    base_url: str
    group_id: str | None
    reasoning_policy: Literal["keep", "drop"]
    created_at: float


class SessionSummary(Wire):
    session_id: str
    group_id: str | None
    task: dict[str, Any]
    metadata: dict[str, Any]
    status: SessionStatus
    reasoning_policy: Literal["keep", "drop"]
    created_at: float
    finished_at: float | None
    outcome: EpisodeOutcome | None = None
    """How the episode ended; None while the session is open."""
    finish_info: dict[str, Any] | None


class SessionListItem(SessionSummary):
    calls: int


class SessionList(Wire):
    """`GET /sessions`."""

    sessions: list[SessionListItem]


class AgentView(Wire):
    agent_id: str
    parent_agent: str | None


class CallView(Wire):
    call_id: str
    agent_id: str
    parent_agent: str | None
    seq: int
    endpoint: str
    parent_call_id: str | None
    kind: str
    reuse: str | None
    shared_prefix_len: int
    prompt_tokens: int
    completion_tokens: int
    finish_reason: dict[str, Any] | None
    weight_version: str | None
    timings: dict[str, Any]
    response: dict[str, Any] | None
    prompt_ids: list[int] | None = None
    sampled_ids: list[int] | None = None
    sampled_logprobs: list[float] | None = None


class RewardView(Wire):
    reward: float
    agent: str | None
    call_id: str | None
    info: dict[str, Any]


class SessionDetail(SessionSummary):
    """`GET /sessions/{sid}` (`?tokens=1` adds each call's ids and logprobs)."""

    agents: list[AgentView]
    calls: list[CallView]
    rewards: list[RewardView]


class Ack(Wire):
    ok: Literal[True]


class AdvantagesAck(Ack):
    calls: int


class PauseState(Wire):
    """The answer to `POST /admin/pause` and `/admin/resume`; `drained` (pause only) says whether
    the in-flight calls finished within the drain timeout."""

    paused: bool
    drained: bool | None = None
    in_flight: int


class GatewayHealth(Wire):
    """`GET /health` (open: no key); `degraded` (503) while the engine does not answer."""

    status: Literal["ok", "degraded"]
    engine: str
    paused: bool
    backend: str
    model: str | None
    in_flight: int
