"""OpenAI messages → the dicts a chat template renders, and the keys that identify them.

Keys decide whether a new call continues an earlier one. A message's key covers what the
template renders from it. An assistant message's key covers its content and tool calls
(name + arguments as parsed JSON), not its reasoning, tool-call ids or surrounding
whitespace: harnesses commonly drop `reasoning_content`, re-serialise arguments or strip
text when they send a reply back, and none of that makes it a different reply. Whether the
reply then re-renders exactly is the prompt builder's check, not the key's.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson

from roost.rollout.gateway.core.errors import InvalidRequest
from roost.rollout.gateway.core.image_parts import ImageInput, ImageParts
from roost.rollout.gateway.openai.wire import ChatMessage, OtherTool, Tool
from roost.serving.json_bounds import MAX_DEPTH, nesting

_SORTED = orjson.OPT_SORT_KEYS


def _text(
    content: str | list[dict[str, Any]] | None, where: str, model: str | None, images: ImageParts | None
) -> str | list[dict[str, Any]] | None:
    """The content as text, or, where it holds images, as the template's parts (text and image
    parts in order); with `model` None, content with non-text parts is kept as sent (the
    pass-through forwards it unchanged, and keys it so)."""
    if content is None or isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        kind = part.get("type")
        at = f"{where}.content[{i}]"
        if kind in ("text", "input_text") and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif model is None:
            return content
        elif kind == "image_url" and images is not None:
            parts.append(images.data_url(_image_url(part, at), at, "image_url"))
        else:
            raise InvalidRequest(
                f"{at} is a {kind!r} part, but model {model!r} reads text only; send text parts, or serve a vision model",
                param=f"{where}.content",
            )
    if any(p["type"] == "image" for p in parts):
        return parts
    return "\n".join(p["text"] for p in parts)


def _image_url(part: dict[str, Any], where: str) -> str:
    image_url = part.get("image_url")
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str):
        raise InvalidRequest(
            f"{where} is an image_url part without a URL; send {{'type': 'image_url', 'image_url': "
            "{'url': 'data:image/png;base64,...'}}",
            param=where,
        )
    return url


def _arguments(arguments: str | dict[str, Any]) -> str | dict[str, Any]:
    return arguments


ArgumentDefaults = dict[str, dict[str, Any]]
"""Per function name, the arguments its schema gives a default, with that default."""


@dataclass
class TemplateCall:
    """A call in the template's terms, whichever wire it came on: each wire maps its request onto
    one (its `template_call`), and the call pipeline plans the prompt from it."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    template_kwargs: dict[str, Any] | None = None
    images: list[ImageInput] = field(default_factory=list)
    """The messages' images, in the order the template renders them."""


def argument_defaults(tools: list[dict[str, Any]] | None) -> ArgumentDefaults:
    """The defaults the tools' schemas declare for their top-level arguments. A harness may fill
    them in when it sends a call back (Claude Code adds Edit's `replace_all: false`): the same
    call, so keys leave them out."""
    out: ArgumentDefaults = {}
    for tool in tools or ():
        function = tool.get("function") or {}
        properties = (function.get("parameters") or {}).get("properties")
        if isinstance(properties, dict):
            given = {k: p["default"] for k, p in properties.items() if isinstance(p, dict) and "default" in p}
            if given:
                out[function.get("name", "")] = given
    return out


def _same_json(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b  # JSON false is not 0


def _canonical_arguments(arguments: str | dict[str, Any], defaults: dict[str, Any]) -> Any:
    if isinstance(arguments, dict):
        value: Any = arguments
    else:
        try:
            value = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return {"__raw__": arguments}
        # deeper than a tool call may be, the text is its own key (orjson cannot write it back)
        if nesting(value) > MAX_DEPTH:
            return {"__raw__": arguments}
    if defaults and isinstance(value, dict):
        return {k: v for k, v in value.items() if not (k in defaults and _same_json(v, defaults[k]))}
    return value


def to_template(
    messages: list[ChatMessage], model: str | None = "the served model", images: ImageParts | None = None
) -> list[dict[str, Any]]:
    """Template dicts: no None values (templates test for presence), `developer` → `system`.
    Image parts go to `images` (which refuses them for a text model); without it a non-text part
    is a 400 naming `model`, or with `model` None kept as sent."""
    if not messages:
        raise InvalidRequest("messages is empty; send at least one message", param="messages")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = "system" if m.role == "developer" else m.role
        content = _text(m.content, where, model, images if role != "assistant" else None)
        d: dict[str, Any] = {"role": role}
        if role == "assistant":
            d["content"] = content or ""
            reasoning = m.reasoning_content if m.reasoning_content is not None else m.reasoning
            if reasoning is not None:
                d["reasoning_content"] = reasoning
            if m.tool_calls:
                d["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": _arguments(c.function.arguments)},
                    }
                    for c in m.tool_calls
                ]
        else:
            if content is None:
                raise InvalidRequest(f"{where} (role {m.role}) has no content", param=f"{where}.content")
            d["content"] = content
            if m.name is not None:
                d["name"] = m.name
            if role == "tool" and m.tool_call_id is not None:
                d["tool_call_id"] = m.tool_call_id
        out.append(d)
    return out


def text_chars(content: str | list[dict[str, Any]]) -> int:
    """The characters of a template message's text (its image parts render as placeholders)."""
    if isinstance(content, str):
        return len(content)
    return sum(len(part["text"]) for part in content if part["type"] == "text")


def _reply_text(content: str | None) -> str:
    """An assistant message's content as a reply key sees it: reasoning a harness folded
    back into the content (`<think>…</think>answer`, split off the same way Qwen's template
    does) and surrounding whitespace (some harnesses strip it) do not make another reply."""
    text = content or ""
    if "</think>" in text:
        text = text.split("</think>")[-1]
    return text.strip()


def message_key(message: dict[str, Any], defaults: ArgumentDefaults | None = None) -> bytes:
    """`defaults`: `argument_defaults` of the call's tools (arguments equal to them are left out)."""
    if message["role"] == "assistant":
        calls = [
            [
                c["function"]["name"],
                _canonical_arguments(c["function"]["arguments"], (defaults or {}).get(c["function"]["name"], {})),
            ]
            for c in message.get("tool_calls") or ()
        ]
        return orjson.dumps(["assistant", _reply_text(message.get("content")), calls], option=_SORTED)
    # A fixed field order instead of sorting keys: this runs for every message of every call.
    return orjson.dumps([message["role"], message["content"], message.get("name"), message.get("tool_call_id")])


def reply_message_key(
    content: str | None, tool_calls: list[tuple[str, str]], defaults: ArgumentDefaults | None = None
) -> bytes:
    """The key of an assistant reply the gateway returned (name, arguments JSON text)."""
    message = {
        "role": "assistant",
        "content": content or "",
        "tool_calls": [{"function": {"name": n, "arguments": a}} for n, a in tool_calls],
    }
    return message_key(message, defaults)


def tool_dicts(tools: list[Tool | OtherTool] | None) -> list[dict[str, Any]] | None:
    """The function tools as the template renders them; other tools are left out (`tool_notes`)."""
    out = [t.model_dump(exclude_none=True) for t in tools or () if isinstance(t, Tool)]
    return out or None


def tool_notes(tools: list[Tool | OtherTool] | None) -> list[str]:
    """A note for each chat tool that is not a function, left out of the prompt."""
    return [
        f"chat: tools.{i} is a {t.type!r} tool, not a function; left out of the prompt"
        for i, t in enumerate(tools or ())
        if isinstance(t, OtherTool)
    ]


def function_tool(name: str, description: str | None, parameters: dict[str, Any]) -> dict[str, Any]:
    """A function tool as a chat request carries it: what the other wires' tools become, built in
    one place so that a tool renders (and keys the token tree) the same whatever wire declared it."""
    function: dict[str, Any] = {"name": name}
    if description is not None:
        function["description"] = description
    function["parameters"] = parameters
    return {"type": "function", "function": function}


def header_key(tools: list[dict[str, Any]] | None, template_kwargs: dict[str, Any] | None) -> bytes:
    """What besides the messages changes a rendered prompt: tools and template kwargs."""
    return orjson.dumps([tools or [], template_kwargs or {}], option=_SORTED)


def chain_keys(header: bytes, keys: list[bytes]) -> list[bytes]:
    """chain[k] identifies the first k messages under this header (chain[0]: none)."""
    h = hashlib.blake2b(header, digest_size=16).digest()
    chain = [h]
    for key in keys:
        h = hashlib.blake2b(h + key, digest_size=16).digest()
        chain.append(h)
    return chain


def extend_chain(previous: bytes, key: bytes) -> bytes:
    return hashlib.blake2b(previous + key, digest_size=16).digest()
