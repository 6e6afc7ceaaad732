"""The tool-call grammar: the JSON-schema rules xgrammar writes keep their string literals and
character classes when their root is renamed, and the whole grammar takes exactly the calls the
reply parser reads."""

from __future__ import annotations

import json

import pytest
import xgrammar

from roost.rollout.chat.reply_parser import HERMES, parse_tool_call
from roost.rollout.gateway.core.tool_grammar import Thinking, rename_root, thinking_at, tool_call_ebnf

# a property called root, a literal with "root" and brackets in it: none of them is the rule
TRICKY = {
    "type": "object",
    "properties": {"root": {"const": 'a root [b] "c"'}, "n": {"type": "integer"}},
    "required": ["root", "n"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "pick", "parameters": TRICKY}},
    {"type": "function", "function": {"name": "wait"}},
]
CALL = '<tool_call>\n{"name": "pick", "arguments": {"root": "a root [b] \\"c\\"", "n": 3}}\n</tool_call>'


def accepts(ebnf: str, text: str) -> bool:
    """Whether the grammar takes the whole text (xgrammar's own string check)."""
    return xgrammar.testing._is_grammar_accept_string(xgrammar.Grammar.from_ebnf(ebnf), text)


def test_rename_touches_rule_names_only():
    ebnf = 'root ::= "root" [root] root_1 | root\nroot_1 ::= "x"'
    assert rename_root(ebnf, "call") == 'call ::= "root" [root] root_1 | call\nroot_1 ::= "x"'


@pytest.mark.parametrize(
    "thinking,prefix,ok",
    [
        (Thinking.CLOSED, "", True),
        (Thinking.CLOSED, "<think>hm</think>\n\n", False),
        (Thinking.ALLOWED, "", True),
        (Thinking.ALLOWED, "<think>\nhm\n</think>\n\n", True),
        (Thinking.OPEN, "hm\n</think>\n\n", True),
        (Thinking.OPEN, "", False),
        # no padding past the template's blank line (a random model once filled it with spaces)
        (Thinking.OPEN, "hm\n</think>", True),
        (Thinking.OPEN, "hm\n</think>\n   \n", False),
        (Thinking.ALLOWED, "<think></think>\n\n\n", False),
    ],
)
def test_the_grammar_takes_a_call_after_the_reasoning_it_allows(thinking, prefix, ok):
    ebnf = tool_call_ebnf(HERMES, TOOLS, thinking, parallel=False)
    assert accepts(ebnf, prefix + CALL) is ok
    body = CALL.removeprefix("<tool_call>\n").removesuffix("\n</tool_call>")
    assert json.loads(parse_tool_call(body).arguments)["n"] == 3


def test_arguments_follow_the_schema_and_parallel_calls_are_one_a_line():
    ebnf = tool_call_ebnf(HERMES, TOOLS, Thinking.CLOSED, parallel=True)
    wait = '<tool_call>\n{"name": "wait", "arguments": {}}\n</tool_call>'
    assert accepts(ebnf, CALL + "\n" + wait)
    assert not accepts(ebnf, CALL.replace('"n": 3', '"n": "3"'))
    assert not accepts(ebnf, '<tool_call>\n{"name": "fly", "arguments": {}}\n</tool_call>')
    assert not accepts(tool_call_ebnf(HERMES, TOOLS, Thinking.CLOSED, parallel=False), CALL + "\n" + wait)


def test_thinking_at_reads_the_prompts_end():
    assert thinking_at("<|im_start|>assistant\n<think>\n\n</think>\n\n", HERMES) is Thinking.CLOSED
    assert thinking_at("<|im_start|>assistant\n<think>\n", HERMES) is Thinking.OPEN
    assert thinking_at("<|im_start|>assistant\n", HERMES) is Thinking.ALLOWED
