"""Structured outputs: what a call's `response_format`, enforced tool choice or `allowed_replies`
asks of the engine, as SGLang's own sampling params (`json_schema`, `regex`, `ebnf`), so a
real SGLang server honours the same request.

A call takes at most one of them; the engine masks sampling with the grammar (the recorded
logprobs stay the model's own) and the call's record says which constraint held its reply.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from roost.rollout.chat.reply_parser import ReplyFormat
from roost.rollout.engine.grammar import ANY_JSON
from roost.rollout.engine_api.wire import choice_regex
from roost.rollout.gateway.anthropic.wire import ToolChoice
from roost.rollout.gateway.core.errors import InvalidRequest
from roost.rollout.gateway.core.template_messages import tool_dicts
from roost.rollout.gateway.core.tool_grammar import Thinking, thinking_at, tool_call_ebnf
from roost.rollout.gateway.openai.wire import ChatCompletionRequest, ResponseFormat


@dataclass(frozen=True)
class Constraint:
    """One call's grammar: the request field it came from and the engine's sampling param."""

    source: str
    """response_format (also a Responses call's text.format), tool_choice or allowed_replies."""
    param: str
    """The SGLang sampling param that carries it: json_schema, regex or ebnf."""
    value: str

    def params(self) -> dict[str, str]:
        return {self.param: self.value}

    def record(self) -> dict[str, str]:
        """What the stored call says about it (its grammar is in the stored sampling params)."""
        return {"source": self.source, "type": self.param}


def from_response_format(fmt: ResponseFormat | None) -> Constraint | None:
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return Constraint("response_format", "json_schema", ANY_JSON)
    if fmt.json_schema is None:
        raise InvalidRequest(
            'response_format {"type": "json_schema"} needs "json_schema": {"name": ..., "schema": {...}}',
            param="response_format",
        )
    # strict or not, the schema is enforced, as SGLang does
    return Constraint("response_format", "json_schema", json.dumps(fmt.json_schema.schema_ or {}))


def from_allowed_replies(replies: list[str] | None) -> Constraint | None:
    """roost's `allowed_replies` as the regex SGLang takes for a list of choices."""
    if replies is None:
        return None
    if not replies or not all(replies):
        raise InvalidRequest("allowed_replies must be a non-empty list of non-empty strings", param="allowed_replies")
    return Constraint("allowed_replies", "regex", choice_regex(replies))


def enforced_tools(tools: list[dict[str, Any]] | None, choice: str | None, param: str) -> list[dict[str, Any]] | None:
    """The tools a reply must call one of: all for `required`, the one named by `choice` (a
    function name), None where nothing is enforced (`auto`, `none`, no choice)."""
    if choice in (None, "auto", "none"):
        return None
    if not tools:
        raise InvalidRequest(
            f"{param} asks for a tool call but the request has no tools; add tools or drop it", param=param
        )
    if choice == "required":
        return tools
    named = [t for t in tools if t["function"]["name"] == choice]
    if not named:
        known = ", ".join(t["function"]["name"] for t in tools)
        raise InvalidRequest(
            f"{param} names the function {choice!r}, which is not among the tools ({known})", param=param
        )
    return named


def from_tools(
    tools: list[dict[str, Any]] | None, fmt: ReplyFormat, thinking: Thinking, parallel: bool
) -> Constraint | None:
    if tools is None:
        return None
    return Constraint("tool_choice", "ebnf", tool_call_ebnf(fmt, tools, thinking, parallel))


def only_one(*constraints: Constraint | None) -> Constraint | None:
    """The call's constraint; a 400 when the request asks for more than one."""
    given = [c for c in constraints if c is not None]
    if len(given) > 1:
        names = " and ".join(c.source for c in given)
        raise InvalidRequest(f"a call takes one constraint; this one asks for {names}: keep one", param=given[1].source)
    return given[0] if given else None


def chat_tool_choice(choice: str | dict[str, Any] | None) -> str | None:
    """An OpenAI `tool_choice` as `required`, `auto`, `none`, a function's name, or None."""
    if not isinstance(choice, dict):
        return choice
    name = (choice.get("function") or {}).get("name") if choice.get("type") == "function" else None
    if not isinstance(name, str) or not name:
        raise InvalidRequest(
            'tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}',
            param="tool_choice",
        )
    return name


def tool_choice_constraint(
    tools: list[dict[str, Any]] | None, choice: str | None, fmt: ReplyFormat, prompt_tail: str, parallel: bool
) -> Constraint | None:
    """The grammar of an enforced tool choice (`choice`: required, auto, none, a function's name
    or None; `prompt_tail`: the rendered prompt's last characters)."""
    wanted = enforced_tools(tools, choice, "tool_choice")
    return from_tools(wanted, fmt, thinking_at(prompt_tail, fmt), parallel)


def chat_constraint(req: ChatCompletionRequest, fmt: ReplyFormat, prompt_tail: str) -> Constraint | None:
    """A chat completion's constraint."""
    tools = tool_choice_constraint(
        tool_dicts(req.tools), chat_tool_choice(req.tool_choice), fmt, prompt_tail, req.parallel_tool_calls is not False
    )
    return only_one(from_response_format(req.response_format), from_allowed_replies(req.allowed_replies), tools)


def messages_constraint(
    tools: list[dict[str, Any]] | None, choice: ToolChoice | None, fmt: ReplyFormat, prompt_tail: str
) -> Constraint | None:
    """An Anthropic Messages call's constraint: tool_choice `any` is `required`, `tool` names one."""
    if choice is None or choice.type in ("auto", "none"):
        return None
    if choice.type == "tool" and not choice.name:
        raise InvalidRequest('tool_choice {"type": "tool"} needs the tool\'s "name"', param="tool_choice")
    return tool_choice_constraint(
        tools,
        "required" if choice.type == "any" else choice.name,
        fmt,
        prompt_tail,
        not choice.disable_parallel_tool_use,
    )


def from_text_format(text: dict[str, Any] | None) -> Constraint | None:
    """The Responses wire's `text.format` (`{"type": "json_schema", "name", "schema", "strict"}`,
    chat's `response_format` with the schema's fields inline)."""
    fmt = (text or {}).get("format")
    if fmt is None:
        return None
    fields = {k: v for k, v in fmt.items() if k != "type"}
    try:
        parsed = ResponseFormat.model_validate(
            {"type": fmt.get("type"), "json_schema": fields} if fmt.get("type") == "json_schema" else fmt
        )
    except ValidationError as exc:
        raise InvalidRequest(
            f"text.format is not a text, json_object or json_schema format: {exc.errors()[0]['msg']}",
            param="text.format",
        ) from None
    return from_response_format(parsed)


def constrained(params: dict[str, Any], constraint: Constraint | None) -> dict[str, Any]:
    """Sampling params with the constraint's grammar added."""
    return params if constraint is None else {**params, **constraint.params()}
