"""OpenAI Responses input items → the chat messages a template renders, the same dicts chat's
`messages.to_template` makes, so a session may mix wires and stay one token tree.

`function_call` ↔ an assistant tool call, `function_call_output` ↔ a tool message,
`reasoning` ↔ the assistant's reasoning (its `encrypted_content` must be the signature this
gateway gave it), `instructions` and system/developer messages ↔ system messages. Reasoning,
assistant messages and function calls in a row make one assistant turn. Items and tools the
template has no place for are left out, each with a note (`item_notes`, `tool_notes`).
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError

from roost.rollout.gateway.anthropic.messages import ThinkingSigner
from roost.rollout.gateway.core.errors import InvalidRequest
from roost.rollout.gateway.core.http_util import validation_error
from roost.rollout.gateway.core.image_parts import ImageParts
from roost.rollout.gateway.core.template_messages import function_tool
from roost.rollout.gateway.responses.wire import (
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    InputImage,
    InputItem,
    MessageItem,
    NamespaceTool,
    OtherItem,
    OtherTool,
    ReasoningItem,
    Refusal,
    ResponsesRequest,
    Tool,
)

_ITEMS = TypeAdapter(list[InputItem])


def input_items(req: ResponsesRequest) -> list[InputItem]:
    """The request's `input` as items (a string is one user message)."""
    if isinstance(req.input, str):
        return [MessageItem(role="user", content=req.input)]
    return list(req.input)


def stored_items(raw: list[dict[str, Any]], where: str) -> list[InputItem]:
    """Items read back from a stored response (its input and output), checked again."""
    try:
        return _ITEMS.validate_python(raw)
    except ValidationError as exc:
        raise InvalidRequest(
            f"{where} holds items this gateway cannot read again ({validation_error(exc).message})",
            param="previous_response_id",
        ) from None


def offered_functions(tools: list[Tool]) -> list[FunctionTool]:
    """The function tools the model is offered: namespaces flattened, the rest left out."""
    out: list[FunctionTool] = []
    for tool in tools:
        if isinstance(tool, FunctionTool):
            out.append(tool)
        elif isinstance(tool, NamespaceTool):
            out.extend(t for t in tool.tools if isinstance(t, FunctionTool))
    return out


def _left_out(tool: OtherTool, where: str) -> str:
    if tool.type == "custom":
        what = "a free-text custom tool, whose calls are not JSON arguments"
    else:
        what = "a tool the provider hosts, which this engine cannot run"
    named = f" {tool.name!r}" if tool.name else ""
    return f"responses: {where} ({tool.type}{named}) is {what}; left out of the prompt"


def tool_notes(tools: list[Tool] | None) -> list[str]:
    """A note for each tool left out of the prompt."""
    notes = []
    for i, tool in enumerate(tools or ()):
        if isinstance(tool, OtherTool):
            notes.append(_left_out(tool, f"tools.{i}"))
        elif isinstance(tool, NamespaceTool):
            notes.extend(
                _left_out(t, f"tools.{i}.tools.{j}") for j, t in enumerate(tool.tools) if isinstance(t, OtherTool)
            )
    return notes


def item_notes(items: list[InputItem], from_chain: int) -> list[str]:
    """A note for each item type left out of the prompt (said once per type)."""
    kinds = sorted({item.type for item in items[from_chain:] if isinstance(item, OtherItem)})
    return [
        f"responses: input items of type {kind!r} have no place in the chat template; left out of the prompt"
        for kind in kinds
    ]


def tool_dicts(tools: list[Tool] | None) -> list[dict[str, Any]] | None:
    """Responses function tools as the OpenAI tool dicts chat renders (the same header key)."""
    out = [
        function_tool(
            tool.name,
            tool.description,
            tool.parameters if tool.parameters is not None else {"type": "object", "properties": {}},
        )
        for tool in offered_functions(tools or [])
    ]
    return out or None


def _text(content: str | list, where: str, images: ImageParts | None) -> str | list[dict[str, Any]]:
    """A message's content as text (its parts joined), or, where it holds images, as the
    template's parts in order; `images` None: an assistant message, which holds no image."""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for k, part in enumerate(content):
        at = f"{where}.{k}"
        if isinstance(part, InputImage):
            parts.append(_image(part, at, images))
        else:
            parts.append({"type": "text", "text": part.refusal if isinstance(part, Refusal) else part.text})
    if any(p["type"] == "image" for p in parts):
        return parts
    return "".join(p["text"] for p in parts)


def _image(part: InputImage, where: str, images: ImageParts | None) -> dict[str, Any]:
    if images is None:
        raise InvalidRequest(
            f"{where} is an input_image part in an assistant message, which holds text only; send images in "
            "user messages or function_call_output items",
            param=where,
        )
    if part.image_url is None:
        images.refuse(
            where,
            "input_image",
            "without an image_url (a file_id names a file this gateway does not hold); send image_url "
            "'data:image/png;base64,...'",
        )
    return images.data_url(part.image_url, where, "input_image")


class _Turns:
    """The template dicts being built, with the assistant turn still open."""

    def __init__(self, images: ImageParts, signer: ThinkingSigner):
        self.images, self.signer = images, signer
        self.out: list[dict[str, Any]] = []
        self.turn: dict[str, Any] | None = None
        self.open_calls: set[str] = set()  # the call ids of the assistant turn just before

    def assistant(self) -> dict[str, Any]:
        if self.turn is None:
            self.turn = {"role": "assistant", "content": ""}
        return self.turn

    def close(self) -> None:
        if self.turn is not None:
            self.out.append(self.turn)
            self.open_calls = {c["id"] for c in self.turn.get("tool_calls", ())}
            self.turn = None

    def add(self, item: InputItem, at: str) -> None:
        if isinstance(item, OtherItem):
            return  # noted by item_notes
        if isinstance(item, ReasoningItem):
            self._reasoning(item, at)
        elif isinstance(item, FunctionCallItem):
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            self.assistant().setdefault("tool_calls", []).append(call)
        elif isinstance(item, MessageItem) and item.role == "assistant":
            self.assistant()["content"] += _text(item.content, f"{at}.content", None)
        elif isinstance(item, FunctionCallOutputItem):
            self._output(item, at)
        else:
            self.close()
            self.open_calls = set()
            role = "user" if item.role == "user" else "system"
            self.out.append({"role": role, "content": _text(item.content, f"{at}.content", self.images)})

    def _reasoning(self, item: ReasoningItem, at: str) -> None:
        text = "".join(part.text for part in (item.content or item.summary))
        if not text:
            return
        if item.encrypted_content is None or not self.signer.valid(text, item.encrypted_content):
            raise InvalidRequest(
                f"{at} is a reasoning item whose encrypted_content this gateway did not give; send "
                "reasoning items back unchanged, or leave them out",
                param=at,
            )
        self.close()  # reasoning opens the next assistant turn
        turn = self.assistant()
        turn["reasoning_content"] = text

    def _output(self, item: FunctionCallOutputItem, at: str) -> None:
        self.close()
        if item.call_id not in self.open_calls:
            raise InvalidRequest(
                f"{at} is a function_call_output for call_id {item.call_id!r}, which the assistant turn just before "
                f"did not make (its call ids: {sorted(self.open_calls)}); answer each function_call by its call_id",
                param=at,
            )
        self.out.append(
            {"role": "tool", "content": _text(item.output, f"{at}.output", self.images), "tool_call_id": item.call_id}
        )


def to_template(
    items: list[InputItem], from_chain: int, instructions: str | None, images: ImageParts, signer: ThinkingSigner
) -> list[dict[str, Any]]:
    """The instructions, then the items (the first `from_chain` from the previous_response_id
    chain, then the request's input), as template dicts; a 400 naming the item for anything
    that cannot be rendered."""
    if len(items) == from_chain:
        raise InvalidRequest("input is empty; send a string or at least one item", param="input")
    if all(isinstance(item, OtherItem) for item in items[from_chain:]):
        kinds = sorted({item.type for item in items[from_chain:]})
        raise InvalidRequest(
            f"input holds only items of types {kinds}, which the chat template has no place for; "
            "send at least one message, function_call_output or reasoning item",
            param="input",
        )
    turns = _Turns(images, signer)
    if instructions:
        turns.out.append({"role": "system", "content": instructions})
    for i, item in enumerate(items):
        at = f"input.{i - from_chain}" if i >= from_chain else f"previous_response_id (item {i})"
        turns.add(item, at)
    turns.close()
    return turns.out
