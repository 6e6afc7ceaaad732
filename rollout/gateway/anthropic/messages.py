"""Anthropic Messages → the chat messages a template renders, the same dicts chat's
`messages.to_template` makes, so a session may mix wires and stay one token tree.

`tool_use` ↔ an assistant tool call, `tool_result` ↔ a tool message, `thinking` ↔ the
assistant's reasoning (rendered under the gateway's keep/drop policy), the top-level system
blocks ↔ the first system message, a `system` turn in `messages` ↔ a system message where it
stands (the template renders it there). A `thinking` block must carry the signature this gateway gave it: reasoning
the model did not produce is refused, as Anthropic refuses it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from roost.rollout.gateway.anthropic.wire import (
    ImageBlock,
    MessageParam,
    PromptFields,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolParam,
    ToolResultBlock,
    ToolUseBlock,
)
from roost.rollout.gateway.core.errors import InvalidRequest
from roost.rollout.gateway.core.image_parts import ImageParts
from roost.rollout.gateway.core.template_messages import function_tool


class ThinkingSigner:
    """Signs the reasoning the gateway returns, and checks the signatures clients send back."""

    def __init__(self, secret: str):
        self._key = hashlib.blake2b(secret.encode(), digest_size=32, person=b"roost-thinking").digest()

    def sign(self, thinking: str) -> str:
        return hmac.new(self._key, thinking.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()

    def valid(self, thinking: str, signature: str) -> bool:
        return hmac.compare_digest(self.sign(thinking).encode(), signature.encode("utf-8", "surrogatepass"))


def tool_dicts(req: PromptFields) -> list[dict[str, Any]] | None:
    """Anthropic's client tools as the OpenAI tool dicts chat renders (the same header key for both
    wires); server tools are left out (anthropic/options.py notes them)."""
    out = [
        function_tool(tool.name, tool.description, tool.input_schema)
        for tool in req.tools or ()
        if isinstance(tool, ToolParam)
    ]
    return out or None


def template_kwargs(req: PromptFields) -> dict[str, Any] | None:
    if req.thinking is not None and req.thinking.type == "disabled":
        return {"enable_thinking": False}
    return None


def to_template(req: PromptFields, images: ImageParts, signer: ThinkingSigner) -> list[dict[str, Any]]:
    """The request's system prompt and messages as template dicts; a 400 naming the block for
    anything that cannot be rendered or was not this gateway's."""
    if not req.messages:
        raise InvalidRequest("messages is empty; send at least one message", param="messages")
    out: list[dict[str, Any]] = []
    if req.system:
        out.append({"role": "system", "content": _system_text(req.system, "system")})
    open_calls: set[str] = set()  # the tool_use ids of the assistant turn just before
    for i, message in enumerate(req.messages):
        where = f"messages.{i}"
        if message.role == "assistant":
            out.append(_assistant(message, where, signer))
            open_calls = {c["id"] for c in out[-1].get("tool_calls", ())}
        elif message.role == "system":
            out.append({"role": "system", "content": _system_text(message.content, f"{where}.content")})
        else:
            out.extend(_user(message, where, images, open_calls))
            open_calls = set()
    return out


def _system_text(content: str | list, where: str) -> str:
    """A system prompt (top-level, or a `system` turn) as one text: its blocks one a line."""
    if isinstance(content, str):
        return content
    for j, block in enumerate(content):
        if not isinstance(block, TextBlock):
            raise InvalidRequest(
                f"{where}.{j} is a {block.type} block, but a system message holds text blocks "
                "only; move it to a user or assistant turn",
                param=f"{where}.{j}",
            )
    return "\n".join(block.text for block in content)


def _image_in_reply(where: str) -> InvalidRequest:
    return InvalidRequest(
        f"{where} is an image block in an assistant turn, which holds text, thinking and tool_use only; "
        "send images in user turns or tool results",
        param=where,
    )


def _image_part(block: ImageBlock, where: str, images: ImageParts) -> dict[str, Any]:
    """An image block as the template's image part: a `base64` source only (nothing is fetched)."""
    source = block.source
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        return images.base64(str(source.get("media_type", "")), source["data"], where, "image")
    images.refuse(
        where,
        "image",
        f"with a {source.get('type')!r} source; this gateway fetches nothing from the network: send "
        "{'type': 'base64', 'media_type': 'image/png', 'data': ...}",
    )


def _parts(text: list[str], parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """A user or tool message's content: its text blocks one a line, or, where it holds images,
    the template's parts in order."""
    if any(p["type"] == "image" for p in parts):
        return parts
    return "\n".join(text)


def _assistant(message: MessageParam, where: str, signer: ThinkingSigner) -> dict[str, Any]:
    if isinstance(message.content, str):
        return {"role": "assistant", "content": message.content}
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(message.content):
        at = f"{where}.content.{j}"
        if isinstance(block, TextBlock):
            text.append(block.text)
        elif isinstance(block, ThinkingBlock):
            if not signer.valid(block.thinking, block.signature):
                raise InvalidRequest(
                    f"{at} is a thinking block whose signature this gateway did not give; send "
                    "thinking blocks back unchanged, or leave them out",
                    param=at,
                )
            reasoning.append(block.thinking)
        elif isinstance(block, ToolUseBlock):
            arguments = json.dumps(block.input, ensure_ascii=False)
            calls.append({"id": block.id, "type": "function", "function": {"name": block.name, "arguments": arguments}})
        elif isinstance(block, ImageBlock):
            raise _image_in_reply(at)
        else:
            raise InvalidRequest(
                f"{at} is a {block.type} block, which an assistant turn cannot hold here "
                "(redacted thinking is never given by this gateway)",
                param=at,
            )
    out: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if reasoning:
        out["reasoning_content"] = "\n".join(reasoning)
    if calls:
        out["tool_calls"] = calls
    return out


def _user(message: MessageParam, where: str, images: ImageParts, open_calls: set[str]) -> list[dict[str, Any]]:
    if isinstance(message.content, str):
        return [{"role": "user", "content": message.content}]
    if not message.content:
        raise InvalidRequest(f"{where}.content is empty; send a string or at least one block", param=f"{where}.content")
    out: list[dict[str, Any]] = []
    text: list[str] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(message.content):
        at = f"{where}.content.{j}"
        if isinstance(block, TextBlock):
            text.append(block.text)
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ToolResultBlock):
            if block.tool_use_id not in open_calls:
                raise InvalidRequest(
                    f"{at} is a tool_result for tool_use {block.tool_use_id!r}, which the assistant turn just before "
                    f"did not make (its tool_use ids: {sorted(open_calls)}); answer each tool_use of the previous "
                    "assistant message, by its id",
                    param=at,
                )
            if parts:
                out.append({"role": "user", "content": _parts(text, parts)})
                text, parts = [], []
            out.append({"role": "tool", "content": _result(block, at, images), "tool_call_id": block.tool_use_id})
        elif isinstance(block, ImageBlock):
            parts.append(_image_part(block, at, images))
        else:
            kind = "redacted_thinking" if isinstance(block, RedactedThinkingBlock) else block.type
            raise InvalidRequest(f"{at} is a {kind} block, which only an assistant turn may hold", param=at)
    if parts:
        out.append({"role": "user", "content": _parts(text, parts)})
    return out


def _result(block: ToolResultBlock, where: str, images: ImageParts) -> str | list[dict[str, Any]]:
    if block.content is None or isinstance(block.content, str):
        return block.content or ""
    text: list[str] = []
    parts: list[dict[str, Any]] = []
    for k, part in enumerate(block.content):
        if isinstance(part, ImageBlock):
            parts.append(_image_part(part, f"{where}.content.{k}", images))
        else:
            text.append(part.text)
            parts.append({"type": "text", "text": part.text})
    return _parts(text, parts)
