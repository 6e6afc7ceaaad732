"""The grammar that enforces a tool call: an EBNF over the model's own tool-call format
(Qwen/Hermes `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`), with each
call's arguments held to its tool's JSON schema.

The EBNF is xgrammar's dialect, which the embedded engine and SGLang's default grammar backend
(xgrammar) both read. xgrammar writes each tool's JSON-schema rules; this module only wraps them
in the envelope, so it imports xgrammar on the first enforced call.
"""

from __future__ import annotations

import enum
import json
from typing import Any

from roost.rollout.chat.reply_parser import ReplyFormat
from roost.rollout.gateway.core.errors import InvalidRequest

CALL_RULE = "tool_call_body"  # the name the call's own grammar root takes inside the reply's grammar


class Thinking(enum.Enum):
    """Where the prompt leaves the model's reasoning block."""

    CLOSED = "closed"  # the template closed it (e.g. Qwen3 with enable_thinking=false): calls only
    OPEN = "open"  # the template opened it: the reply finishes the thought first
    ALLOWED = "allowed"  # the template said nothing: the model may think first


def thinking_at(prompt_tail: str, fmt: ReplyFormat) -> Thinking:
    """Where the prompt (its last characters, `prompt_tail`) leaves the reasoning block."""
    tail = prompt_tail.rstrip()
    if tail.endswith(fmt.think_end):
        return Thinking.CLOSED
    if tail.endswith(fmt.think_start):
        return Thinking.OPEN
    return Thinking.ALLOWED


def call_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON schema of one call's body: `{"name": <one of tools>, "arguments": <its parameters>}`,
    in the key order Qwen's template renders."""
    options = [_one_call(tool["function"]) for tool in tools]
    return options[0] if len(options) == 1 else {"anyOf": options}


def _one_call(function: dict[str, Any]) -> dict[str, Any]:
    arguments = function.get("parameters") or {"type": "object"}
    return {
        "type": "object",
        "properties": {"name": {"const": function["name"]}, "arguments": arguments},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def tool_call_ebnf(fmt: ReplyFormat, tools: list[dict[str, Any]], thinking: Thinking, parallel: bool) -> str:
    """The EBNF of a reply that is one tool call of `tools` (several, one a line, if `parallel`),
    after the reasoning `thinking` allows."""
    call_rules = rename_root(_schema_ebnf(call_schema(tools)), CALL_RULE)
    call = f"{_quote(fmt.call_start + chr(10))} {CALL_RULE} {_quote(chr(10) + fmt.call_end)}"
    calls = 'tool_call_one ("\\n" tool_call_one)*' if parallel else "tool_call_one"
    # at most the blank line the template renders after the thought: free whitespace there let a
    # random model pad the reply with spaces, which came back as a whitespace-only message
    think_rule = f'tool_call_thought ::= ([^<] | "<" [^/])* {_quote(fmt.think_end)} ("\\n" "\\n"?)?'
    head = {
        Thinking.CLOSED: "",
        Thinking.OPEN: "tool_call_thought ",
        Thinking.ALLOWED: f"({_quote(fmt.think_start)} tool_call_thought)? ",
    }[thinking]
    return "\n".join([f"root ::= {head}{calls}", f"tool_call_one ::= {call}", think_rule, call_rules])


def _schema_ebnf(schema: dict[str, Any]) -> str:
    try:
        import xgrammar
    except ImportError as exc:
        raise InvalidRequest(
            "an enforced tool_choice needs the grammar library xgrammar in the gateway, which "
            "is not installed here: pip install 'roost[grammar]'",
            param="tool_choice",
        ) from exc
    try:
        return str(xgrammar.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False))
    except (RuntimeError, ValueError) as exc:
        raise InvalidRequest(
            f"a tool's parameters are not a JSON schema the grammar library takes ({exc}); "
            "simplify the schema or use tool_choice auto",
            param="tools",
        ) from exc


def rename_root(ebnf: str, name: str) -> str:
    """`ebnf` with its rule `root` renamed: every bare `root` outside string literals and
    character classes (xgrammar names no other rule exactly `root`)."""
    out, i = [], 0
    while i < len(ebnf):
        ch = ebnf[i]
        if ch in '"[':
            end = _closing(ebnf, i, '"' if ch == '"' else "]")
            out.append(ebnf[i:end])
            i = end
        elif ch.isalpha() or ch == "_":
            end = i
            while end < len(ebnf) and (ebnf[end].isalnum() or ebnf[end] in "_-"):
                end += 1
            word = ebnf[i:end]
            out.append(name if word == "root" else word)
            i = end
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _closing(text: str, start: int, close: str) -> int:
    """The index just past the `close` that ends the literal or class opened at `start`."""
    i = start + 1
    while text[i] != close:
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _quote(text: str) -> str:
    """An EBNF string literal (JSON's escapes are xgrammar's)."""
    return json.dumps(text)
