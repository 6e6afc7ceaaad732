"""A chat conversation sent as each wire's request and read back through that wire's own
parser and mapping (its `template_call`, as its front-end calls it): what `roost preflight` plays
per wire. Each function answers the `TemplateCall` the gateway would plan from the conversation
arriving on that wire, so a turn that extends on chat but forks on another wire shows where the
wire's mapping differs.

The model's replies carry their reasoning back signed, as a client echoing the gateway's
`thinking` blocks or `reasoning` items would.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from roost.rollout.gateway.anthropic import calls as anthropic_calls
from roost.rollout.gateway.anthropic.messages import ThinkingSigner
from roost.rollout.gateway.anthropic.wire import PromptFields
from roost.rollout.gateway.core.image_parts import ImageParts
from roost.rollout.gateway.core.template_messages import TemplateCall
from roost.rollout.gateway.openai import chat_calls
from roost.rollout.gateway.openai.wire import ChatCompletionRequest
from roost.rollout.gateway.responses import calls as responses_calls
from roost.rollout.gateway.responses.items import input_items
from roost.rollout.gateway.responses.wire import ResponsesRequest

Dicts = list[dict[str, Any]]
WireRoundTrip = Callable[[Dicts, Dicts, "dict[str, Any] | None"], TemplateCall]
MODEL = "preflight"


def via_chat(conversation: Dicts, tools: Dicts, template_kwargs: dict[str, Any] | None) -> TemplateCall:
    req = ChatCompletionRequest.model_validate(
        {"model": MODEL, "messages": conversation, "tools": tools or None, "chat_template_kwargs": template_kwargs}
    )
    return chat_calls.template_call(req, ImageParts(None, MODEL))


def _anthropic_assistant(m: dict[str, Any], signer: ThinkingSigner) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if m.get("reasoning_content"):
        thinking = m["reasoning_content"]
        blocks.append({"type": "thinking", "thinking": thinking, "signature": signer.sign(thinking)})
    if m.get("content"):
        blocks.append({"type": "text", "text": m["content"]})
    for call in m.get("tool_calls") or ():
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": call["function"]["name"],
                "input": json.loads(call["function"]["arguments"]),
            }
        )
    return blocks


def via_messages(signer: ThinkingSigner) -> WireRoundTrip:
    def run(conversation: Dicts, tools: Dicts, template_kwargs: dict[str, Any] | None) -> TemplateCall:
        system = "\n".join(m["content"] for m in conversation if m["role"] == "system")
        turns: list[dict[str, Any]] = []
        for m in conversation:
            if m["role"] == "assistant":
                turns.append({"role": "assistant", "content": _anthropic_assistant(m, signer)})
                continue
            if m["role"] == "system":
                continue
            block = (
                {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
                if m["role"] == "tool"
                else {"type": "text", "text": m["content"]}
            )
            if turns and turns[-1]["role"] == "user":
                turns[-1]["content"].append(block)
            else:
                turns.append({"role": "user", "content": [block]})
        thinking = {"type": "disabled"} if template_kwargs == {"enable_thinking": False} else None
        req = PromptFields.model_validate(
            {
                "model": MODEL,
                "system": system or None,
                "messages": turns,
                "thinking": thinking,
                "tools": [
                    {
                        "name": t["function"]["name"],
                        "description": t["function"].get("description"),
                        "input_schema": t["function"]["parameters"],
                    }
                    for t in tools
                ],
            }
        )
        return anthropic_calls.template_call(req, ImageParts(None, MODEL), signer)

    return run


def _items(m: dict[str, Any], signer: ThinkingSigner) -> list[dict[str, Any]]:
    if m["role"] == "tool":
        return [{"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]}]
    if m["role"] != "assistant":
        return [{"role": m["role"], "content": m["content"]}]
    items: list[dict[str, Any]] = []
    if m.get("reasoning_content"):
        text = m["reasoning_content"]
        items.append(
            {
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": text}],
                "encrypted_content": signer.sign(text),
            }
        )
    if m.get("content"):
        items.append({"role": "assistant", "content": m["content"]})
    for call in m.get("tool_calls") or ():
        items.append(
            {
                "type": "function_call",
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
            }
        )
    return items


def via_responses(signer: ThinkingSigner) -> WireRoundTrip:
    """Responses has no `chat_template_kwargs`: a conversation that needs them is not sent."""

    def run(conversation: Dicts, tools: Dicts, template_kwargs: dict[str, Any] | None) -> TemplateCall:
        items = [item for m in conversation for item in _items(m, signer)]
        req = ResponsesRequest.model_validate(
            {"model": MODEL, "input": items, "tools": [{"type": "function", **t["function"]} for t in tools]}
        )
        return responses_calls.template_call(req, input_items(req), 0, ImageParts(None, MODEL), signer)

    return run


def wires(signer: ThinkingSigner) -> dict[str, WireRoundTrip]:
    return {"chat": via_chat, "messages": via_messages(signer), "responses": via_responses(signer)}
