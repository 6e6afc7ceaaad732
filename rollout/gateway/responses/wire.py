"""OpenAI Responses wire types the gateway accepts (`POST /v1/responses`), with the field
names of the `openai` SDK's `openai.types.responses` params.

Input items are a union tagged by `type` (a message may leave it out, as the SDK's
`EasyInputMessageParam` does), so a malformed item is a 400 naming its place. Codex and the
Agents SDK grow faster than this gateway: an item or tool of a type it does not render (a
`web_search_call`, a hosted `web_search` or `file_search` tool, a `custom` tool) and a
top-level field it does not know are accepted and left out, with a note on the call
(request_notes.py). `docs/gateway.md` lists what is honoured and what is recorded only.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, Tag

from roost.rollout.gateway.core.wire_base import Lenient, Wire, tagged


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


class OtherItem(Lenient):
    """An item of a type the template has no turn for (`web_search_call`, `custom_tool_call`,
    `item_reference`, `compaction`, ...): left out of the prompt, with a note."""

    type: str


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[OtherItem, Tag("other")],
    tagged(("message", "function_call", "function_call_output", "reasoning"), "message"),
]


class FunctionTool(Wire):
    """A function tool: the model calls it, the harness runs it."""

    type: Literal["function"]
    name: str = Field(min_length=1)
    parameters: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


class OtherTool(Lenient):
    """A tool that is not a JSON function: OpenAI's hosted tools (`web_search`, `file_search`,
    `code_interpreter`, ...), which the engine cannot run, and free-text `custom` tools, whose
    calls are not JSON arguments. Left out of the prompt, with a note."""

    type: str
    name: str | None = None


Member = Annotated[
    Annotated[FunctionTool, Tag("function")] | Annotated[OtherTool, Tag("other")], tagged(("function",), None)
]


class NamespaceTool(Wire):
    """A named group of tools (Codex sends its sub-agent tools so); its functions are rendered
    as plain tools."""

    type: Literal["namespace"]
    name: str = Field(min_length=1)
    tools: list[Member]
    description: str | None = None


Tool = Annotated[
    Annotated[FunctionTool, Tag("function")]
    | Annotated[NamespaceTool, Tag("namespace")]
    | Annotated[OtherTool, Tag("other")],
    tagged(("function", "namespace"), None),
]


class ToolChoiceFunction(Wire):
    type: Literal["function"]
    name: str


class ReasoningConfig(Wire):
    effort: Literal["minimal", "low", "medium", "high"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class ResponsesRequest(Lenient):
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
