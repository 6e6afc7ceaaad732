"""Qwen/Hermes replies → reasoning, content and tool calls; streamed and whole agree."""

from __future__ import annotations

import json
import random

import pytest

from roost.rollout.chat.reply_parser import HERMES, ReplyParser, collect

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
CASES = [
    ("Hello!", dict(content="Hello!", reasoning=None, calls=[])),
    ("<think>\nhmm\n</think>\n\nHello", dict(content="Hello", reasoning="hmm", calls=[])),
    (CALL, dict(content=None, reasoning=None, calls=[("get_weather", '{"city": "Paris"}')])),
    (
        "Let me check.\n" + CALL,
        dict(content="Let me check.", reasoning=None, calls=[("get_weather", '{"city": "Paris"}')]),
    ),
    (
        "<think>\nx\n</think>\n\n" + CALL + "\n" + CALL.replace("Paris", "Rome"),
        dict(
            content=None,
            reasoning="x",
            calls=[("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Rome"}')],
        ),
    ),
    # Keys in another order: arguments re-serialised the way the template's tojson writes them.
    (
        '<tool_call>\n{"arguments": {"q": "a", "n": 1}, "name": "search"}\n</tool_call>',
        dict(content=None, reasoning=None, calls=[("search", '{"q": "a", "n": 1}')]),
    ),
    ("<think>\nstill thinking", dict(content="", reasoning="still thinking", calls=[])),
    ("text with <tool_call partial", dict(content="text with <tool_call partial", reasoning=None, calls=[])),
]


@pytest.mark.parametrize("text,want", CASES, ids=[str(i) for i in range(len(CASES))])
def test_parse_whole_and_streamed(text, want):
    whole = ReplyParser(parse_tools=True).parse(text)
    assert whole.content == want["content"] and whole.reasoning == want["reasoning"]
    assert [(c.name, c.arguments) for c in whole.tool_calls] == want["calls"]
    assert not whole.failures
    rng = random.Random(0)
    for _ in range(20):
        parser, events, i = ReplyParser(parse_tools=True), [], 0
        while i < len(text):
            step = rng.randint(1, 7)
            events += parser.feed(text[i : i + step])
            i += step
        assert collect(events + parser.finish()) == whole


@pytest.mark.parametrize(
    "text,reason",
    [
        ("<tool_call>\n{not json}\n</tool_call>", "not JSON"),
        ('<tool_call>\n{"arguments": {}}\n</tool_call>', '"name"'),
        ('<tool_call>\n{"name": "f", "arguments": [1]}\n</tool_call>', "must be an object"),
        ('<tool_call>\n{"name": "f", "arguments": {"a"', "unclosed"),
    ],
)
def test_parse_failure_is_reported_and_kept_as_content(text, reason):
    reply = ReplyParser(parse_tools=True).parse(text)
    assert reply.tool_calls == [] and reply.content == text
    assert len(reply.failures) == 1 and reason in reply.failures[0]


def test_tools_off_leaves_tool_calls_as_content():
    reply = ReplyParser(parse_tools=False).parse(CALL)
    assert reply.content == CALL and reply.tool_calls == []


def test_format_call_is_what_the_parser_reads():
    text = HERMES.format_call("search", json.dumps({"q": "ünïcode"}, ensure_ascii=False))
    [call] = ReplyParser(parse_tools=True).parse(text).tool_calls
    assert call.name == "search" and json.loads(call.arguments) == {"q": "ünïcode"}
