"""OpenAI Responses wire types the gateway accepts (`POST /v1/responses`), with the field
names of the `openai` SDK's `openai.types.responses` params.

Input items are a union tagged by `type` (a message may leave it out, as the SDK's
`EasyInputMessageParam` does), so a malformed item is a 400 naming its place. Unknown fields
are refused; fields that change nothing on this gateway's engines (`include`,
`prompt_cache_key`, `parallel_tool_calls`, `service_tier`, `metadata`, `user`,
`client_metadata`, `truncation`, `text`, `reasoning` effort, a hosted `web_search` tool) are
accepted.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from .wire import Wire


class InputText(Wire):
    type: Literal["input_text", "output_text"]
    text: str
    annotations: list[dict[str, Any]] | None = None
    logprobs: list[dict[str, Any]] | None = None


class InputImage(Wire):
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["low", "high", "auto"] = "auto"


class Refusal(Wire):
    type: Literal["refusal"]
    refusal: str


ContentPart = Annotated[InputText | InputImage | Refusal, Field(discriminator="type")]


class MessageItem(Wire):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[ContentPart]
    id: str | None = None
    status: str | None = None


class FunctionCallItem(Wire):
    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str
    id: str | None = None
    status: str | None = None


class FunctionCallOutputItem(Wire):
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[ContentPart]
    id: str | None = None
    status: str | None = None


class ReasoningText(Wire):
    type: Literal["reasoning_text", "summary_text"]
    text: str


class ReasoningItem(Wire):
    type: Literal["reasoning"]
    id: str | None = None
    summary: list[ReasoningText] = []
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: str | None = None


def _item_type(value: Any) -> str:
    if isinstance(value, dict):
        return value.get("type", "message")
    return getattr(value, "type", "message")


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")] | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")] | Annotated[ReasoningItem, Tag("reasoning")],
    Discriminator(_item_type),
]


class FunctionTool(Wire):
    """A function tool; OpenAI's hosted tools (web search, file search, computer use) are not served."""

    type: Literal["function"]
    name: str = Field(min_length=1)
    parameters: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


class NamespaceTool(Wire):
    """A named group of function tools (Codex sends its sub-agent tools so); its functions are
    rendered as plain tools."""

    type: Literal["namespace"]
    name: str = Field(min_length=1)
    tools: list[FunctionTool]
    description: str | None = None


class WebSearchTool(Wire):
    """OpenAI's hosted web search: accepted, as Codex always sends it, but never offered to the
    model (the engine cannot search)."""

    type: Literal["web_search", "web_search_preview"]
    external_web_access: bool | None = None
    filters: dict[str, Any] | None = None
    search_context_size: Literal["low", "medium", "high"] | None = None
    user_location: dict[str, Any] | None = None


Tool = Annotated[FunctionTool | NamespaceTool | WebSearchTool, Field(discriminator="type")]


class ToolChoiceFunction(Wire):
    type: Literal["function"]
    name: str


class ReasoningConfig(Wire):
    effort: Literal["minimal", "low", "medium", "high"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class ResponsesRequest(Wire):
    """`POST /v1/responses`."""

    model: str
    input: str | list[InputItem]
    instructions: str | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceFunction | None = None
    previous_response_id: str | None = None
    store: bool = True
    stream: bool = False
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    reasoning: ReasoningConfig | None = None
    include: list[str] | None = None
    parallel_tool_calls: bool | None = None
    prompt_cache_key: str | None = None
    service_tier: str | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    client_metadata: dict[str, Any] | None = None  # Codex's thread and turn ids
    truncation: Literal["auto", "disabled"] | None = None
    text: dict[str, Any] | None = None
    # Scripted-sampler control for tests and benchmarks (embedded engine only; `extra_body`).
    custom_params: dict[str, Any] | None = None

    @property
    def max_tokens(self) -> int | None:
        """`max_output_tokens` under the name the shared sampling checks read."""
        return self.max_output_tokens
