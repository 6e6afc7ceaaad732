"""Split a model's reply into reasoning, content and tool calls, as it streams.

The format is Qwen/Hermes: an optional `<think>…</think>` block first, then content, then
`<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>` blocks. The parser is fed text
deltas and answers events, so streamed and non-streamed replies are parsed by the same
code. Whitespace is cut where the chat template puts it back (newlines around the
reasoning, one newline before a tool call), so that a reply re-renders as it was sampled.

A tool-call block that does not parse is reported as a `failure` event and its raw text
is returned as content: the caller counts it; nothing the model said is dropped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import orjson

from roost.serving.json_bounds import MAX_DEPTH, nesting


@dataclass(frozen=True)
class ReplyFormat:
    """The tags of one model family's reply format."""

    think_start: str = "<think>"
    think_end: str = "</think>"
    call_start: str = "<tool_call>"
    call_end: str = "</tool_call>"

    def format_call(self, name: str, arguments: str) -> str:
        """The text a model of this family emits for one tool call (used by preflight)."""
        return f'{self.call_start}\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {arguments}}}\n{self.call_end}'


HERMES = ReplyFormat()

# `{"name": "<name>", "arguments": <args>}`: the layout Qwen's template renders. When a call
# is in this layout we return its arguments text as sampled, so it re-renders exactly.
_CANONICAL_CALL = re.compile(
    r'\A\s*\{\s*"name"\s*:\s*"(?:[^"\\]|\\.)*"\s*,\s*"arguments"\s*:\s*(?P<args>.*)\}\s*\Z', re.DOTALL
)


@dataclass
class ParsedToolCall:
    name: str
    arguments: str  # JSON text


@dataclass
class ReplyEvent:
    kind: str  # reasoning | content | tool_call | failure
    text: str = ""
    call: ParsedToolCall | None = None


@dataclass
class ParsedReply:
    content: str | None
    reasoning: str | None
    tool_calls: list[ParsedToolCall] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


class ToolCallError(ValueError):
    """A `<tool_call>` block whose body is not `{"name": str, "arguments": object}`."""


def parse_tool_call(body: str) -> ParsedToolCall:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ToolCallError(f"tool call body is not JSON ({exc}): {body[:200]!r}") from exc
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        raise ToolCallError(f'tool call body lacks a string "name": {body[:200]!r}')
    args = value.get("arguments", value.get("parameters", {}))
    if isinstance(args, str):
        return ParsedToolCall(value["name"], args)
    if not isinstance(args, dict):
        raise ToolCallError(f'tool call "arguments" must be an object, got {type(args).__name__}')
    depth = nesting(args)
    if depth > MAX_DEPTH:
        raise ToolCallError(f'tool call "arguments" nest {depth} deep; at most {MAX_DEPTH} levels are taken')
    match = _CANONICAL_CALL.match(body)
    if match is not None:
        raw = match.group("args").rstrip()
        try:
            if orjson.loads(raw) == args:
                return ParsedToolCall(value["name"], raw)
        except orjson.JSONDecodeError:
            pass
    return ParsedToolCall(value["name"], json.dumps(args, ensure_ascii=False))


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


class ReplyParser:
    """Incremental parser; `feed` text deltas, then `finish` once."""

    def __init__(
        self,
        fmt: ReplyFormat = HERMES,
        *,
        parse_tools: bool,
        parse_reasoning: bool = True,
        starts_in_reasoning: bool = False,
    ):
        self.fmt = fmt
        self.parse_tools = parse_tools
        self._buf = ""
        self._state = "reasoning" if starts_in_reasoning else ("start" if parse_reasoning else "content")
        self._lead = True  # strip newlines at the start of the current part
        self._after_calls = False
        self.calls: list[ParsedToolCall] = []

    def feed(self, text: str) -> list[ReplyEvent]:
        self._buf += text
        return self._drain(final=False)

    def finish(self) -> list[ReplyEvent]:
        return self._drain(final=True)

    def parse(self, text: str) -> ParsedReply:
        """Parse a whole reply at once."""
        return collect(self.feed(text) + self.finish())

    def _drain(self, final: bool) -> list[ReplyEvent]:
        events: list[ReplyEvent] = []
        while True:
            before = (self._state, len(self._buf))
            step = getattr(self, f"_step_{self._state}")(final)
            events.extend(step)
            if (self._state, len(self._buf)) == before:
                return events

    def _step_start(self, final: bool) -> list[ReplyEvent]:
        head = self._buf.lstrip()
        if head.startswith(self.fmt.think_start):
            self._buf = head[len(self.fmt.think_start) :]
            self._state, self._lead = "reasoning", True
        elif final or not self.fmt.think_start.startswith(head) or not head and len(self._buf) > 64:
            self._state, self._lead = "content", False
        return []

    def _emit(self, kind: str, text: str) -> list[ReplyEvent]:
        if self._lead:
            text = text.lstrip("\n")
            if text:
                self._lead = False
        return [ReplyEvent(kind, text)] if text else []

    def _step_reasoning(self, final: bool) -> list[ReplyEvent]:
        end = self._buf.find(self.fmt.think_end)
        if end >= 0:
            text, self._buf = self._buf[:end].rstrip("\n"), self._buf[end + len(self.fmt.think_end) :]
            out = self._emit("reasoning", text)
            self._state, self._lead = "content", True
            return out
        if final:
            text, self._buf = self._buf, ""
            return self._emit("reasoning", text)
        keep = _partial_suffix(self._buf, self.fmt.think_end)
        safe = self._buf[: len(self._buf) - keep]
        safe_out = safe.rstrip("\n")  # trailing newlines may turn out to precede </think>
        self._buf = self._buf[len(safe_out) :]
        return self._emit("reasoning", safe_out)

    def _step_content(self, final: bool) -> list[ReplyEvent]:
        if not self.parse_tools:
            text, self._buf = self._buf, ""
            return self._emit("content", text)
        start = self._buf.find(self.fmt.call_start)
        if self._after_calls:
            # Between and after tool calls the template writes only newlines; anything
            # more the model said is passed on as content, once we know it is more.
            if start >= 0:
                before, self._buf = self._buf[:start].strip(), self._buf[start + len(self.fmt.call_start) :]
                self._state = "call"
                return self._emit("content", before)
            if final:
                text, self._buf = self._buf.strip(), ""
                return self._emit("content", text)
            return []
        if start >= 0:
            before, self._buf = self._buf[:start], self._buf[start + len(self.fmt.call_start) :]
            self._state = "call"
            if before.endswith("\n"):
                before = before[:-1]  # the template writes this newline itself
            return self._emit("content", before)
        if final:
            text, self._buf = self._buf, ""
            return self._emit("content", text)
        keep = _partial_suffix(self._buf, self.fmt.call_start)
        safe = self._buf[: len(self._buf) - keep].rstrip("\n")  # a newline may precede a call
        self._buf = self._buf[len(safe) :]
        return self._emit("content", safe)

    def _step_call(self, final: bool) -> list[ReplyEvent]:
        end = self._buf.find(self.fmt.call_end)
        if end < 0 and not final:
            return []
        if end < 0:
            body, self._buf = self._buf, ""
            raw = self.fmt.call_start + body
            reason = "unclosed tool call (the reply ended inside it)"
        else:
            body, self._buf = self._buf[:end], self._buf[end + len(self.fmt.call_end) :]
            raw = self.fmt.call_start + body + self.fmt.call_end
            try:
                call = parse_tool_call(body)
            except ToolCallError as exc:
                reason = str(exc)
            else:
                self.calls.append(call)
                self._state, self._after_calls, self._lead = "content", True, False
                return [ReplyEvent("tool_call", call=call)]
        self._state, self._after_calls, self._lead = "content", True, False
        return [ReplyEvent("failure", text=reason), ReplyEvent("content", raw)]


def collect(events: list[ReplyEvent]) -> ParsedReply:
    content: list[str] = []
    reasoning: list[str] = []
    reply = ParsedReply(content=None, reasoning=None)
    for event in events:
        if event.kind == "content":
            content.append(event.text)
        elif event.kind == "reasoning":
            reasoning.append(event.text)
        elif event.kind == "tool_call" and event.call is not None:
            reply.tool_calls.append(event.call)
        elif event.kind == "failure":
            reply.failures.append(event.text)
    text = "".join(content)
    reply.content = text if text or not reply.tool_calls else None
    reply.reasoning = "".join(reasoning) if reasoning else None
    return reply
