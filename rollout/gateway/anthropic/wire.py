"""Anthropic Messages wire types the gateway accepts (`POST /v1/messages`,
`POST /v1/messages/count_tokens`), with the field names of the `anthropic` SDK's params.

Blocks are a union tagged by `type`, so a malformed block is a 400 naming its place and what
its type needs. The top level (and `output_config`, each `context_management` edit) keeps
fields it does not know instead of refusing them: Claude Code adds fields faster than this
gateway learns them, and each is noted with the call (request_notes.py). Anthropic's server
tools (`web_search_20250305`, ...) are accepted and left out of the prompt with a note.
`docs/gateway.md` lists which fields are honoured and which are accepted and recorded only.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, Tag

from roost.rollout.gateway.core.wire_base import Lenient, Wire, tagged


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
    """A turn; `system` ones may come anywhere (Claude Code sends its agent list so), text only."""

    role: Literal["user", "assistant", "system"]
    content: str | list[Block]


class ToolParam(Wire):
    """A client tool: the model calls it, the harness runs it."""

    name: str = Field(min_length=1)
    input_schema: dict[str, Any]
    description: str | None = None
    type: Literal["custom"] | None = None
    cache_control: dict[str, Any] | None = None
    strict: bool | None = None
    defer_loading: bool | None = None  # Claude Code's tool search; every tool is rendered here


class ServerTool(Lenient):
    """One of Anthropic's server tools (`web_search_20250305`, `bash_20250124`, ...): Anthropic
    runs them, the engine here cannot, so they are left out of the prompt with a note."""

    type: str
    name: str | None = None


Tool = Annotated[
    Annotated[ToolParam, Tag("custom")] | Annotated[ServerTool, Tag("other")], tagged(("custom",), "custom")
]


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


class ContextEdit(Lenient):
    """One `context_management` edit: `clear_thinking_20251015` (`keep`: `"all"` or
    `{"type": "thinking_turns", "value": N}`) is applied; the others are noted."""

    type: str = Field(min_length=1)
    keep: Literal["all"] | dict[str, Any] | None = None


class ContextManagement(Wire):
    edits: list[ContextEdit] = []


class OutputFormat(Wire):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(Lenient):
    """`effort` has no counterpart on a token engine (noted); `format` holds the reply to a schema."""

    effort: str | None = None
    format: OutputFormat | None = None


class PromptFields(Lenient):
    """What makes the prompt: shared by `messages` and `messages/count_tokens`."""

    model: str
    messages: list[MessageParam]
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    cache_control: dict[str, Any] | None = None
    # Sent by Claude Code. Past thinking is kept or cleared as clear_thinking asks (the
    # keep/drop reasoning policy for the call); output_config's format is enforced.
    context_management: ContextManagement | None = None
    output_config: OutputConfig | None = None


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
