"""OpenAI wire types the gateway accepts (chat and text completions), its model list and its
OpenAI-shaped error body.

Unknown fields are rejected with a 400 naming them, so a typo'd sampling parameter cannot
silently change nothing; only a tool of a type that is not a function is accepted (and left
out, with a note). Fields OpenAI defines that roost cannot honour are accepted only
where ignoring them is harmless (`user`, `store`, `metadata`, ...); the rest are refused in
`core/sampling_params.py` with a message saying so.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Tag

from roost.rollout.gateway.core.wire_base import Lenient, Wire, tagged


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
    tools: (
        list[
            Annotated[
                Annotated[Tool, Tag("function")] | Annotated[OtherTool, Tag("other")], tagged(("function",), "function")
            ]
        ]
        | None
    ) = None
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
