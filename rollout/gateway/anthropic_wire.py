"""Anthropic Messages wire types the gateway accepts (`POST /v1/messages`,
`POST /v1/messages/count_tokens`), with the field names of the `anthropic` SDK's params.

Blocks are a union tagged by `type`, so a malformed block is a 400 naming its place and what
its type needs. Unknown fields are refused, as Anthropic's API does; fields that change
nothing here (`cache_control`, `metadata`, `service_tier`, citations, Claude Code's
`context_management`, `output_config` and `defer_loading`) are accepted.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from .wire import Wire


class TextBlock(Wire):
    type: Literal["text"]
    text: str
    cache_control: dict[str, Any] | None = None
    citations: list[dict[str, Any]] | None = None


class ImageBlock(Wire):
    type: Literal["image"]
    source: dict[str, Any]
    cache_control: dict[str, Any] | None = None
    transformations: dict[str, Any] | None = None


class ToolUseBlock(Wire):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]
    cache_control: dict[str, Any] | None = None
    caller: dict[str, Any] | None = None  # who called the tool, as Anthropic's answers say; echoed back
    toolset_name: str | None = None


class ToolResultBlock(Wire):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[Annotated[TextBlock | ImageBlock, Field(discriminator="type")]] | None = None
    is_error: bool | None = None
    cache_control: dict[str, Any] | None = None
    toolset_name: str | None = None


class ThinkingBlock(Wire):
    type: Literal["thinking"]
    thinking: str
    signature: str


class RedactedThinkingBlock(Wire):
    type: Literal["redacted_thinking"]
    data: str


Block = Annotated[
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock,
    Field(discriminator="type"),
]


class MessageParam(Wire):
    role: Literal["user", "assistant"]
    content: str | list[Block]


class ToolParam(Wire):
    """A client tool; Anthropic's server tools (`bash_20250124`, `web_search_...`) are not served."""

    name: str = Field(min_length=1)
    input_schema: dict[str, Any]
    description: str | None = None
    type: Literal["custom"] | None = None
    cache_control: dict[str, Any] | None = None
    strict: bool | None = None
    defer_loading: bool | None = None  # Claude Code's tool search; every tool is rendered here


class ToolChoice(Wire):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingConfig(Wire):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(None, ge=0)
    display: Literal["summarized", "omitted"] | None = None


class Metadata(Wire):
    user_id: str | None = None


class PromptFields(Wire):
    """What makes the prompt: shared by `messages` and `messages/count_tokens`."""

    model: str
    messages: list[MessageParam]
    system: str | list[TextBlock] | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    cache_control: dict[str, Any] | None = None


class MessagesRequest(PromptFields):
    """`POST /v1/messages`."""

    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(None, ge=0.0, le=1.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    metadata: Metadata | None = None
    service_tier: Literal["auto", "standard_only"] | None = None
    # Sent by Claude Code; they steer Anthropic's servers (thinking clean-up, effort) and change
    # nothing on a token engine, whose reasoning follows the gateway's keep/drop policy.
    context_management: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    # Scripted-sampler control for tests and benchmarks (embedded engine only; `extra_body`).
    custom_params: dict[str, Any] | None = None


class CountTokensRequest(PromptFields):
    """`POST /v1/messages/count_tokens`."""


class AnthropicErrorDetail(Wire):
    type: str
    message: str


class AnthropicErrorBody(Wire):
    """Every error on the Messages routes, Anthropic-shaped."""

    type: Literal["error"] = "error"
    error: AnthropicErrorDetail
