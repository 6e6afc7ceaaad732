"""Turning query results into what the templates show: messages, replies, token trees; and rendering.

Message text is cut to `TEXT_LIMIT` characters and a call's messages to `MESSAGE_LIMIT`, so a
call with a huge prompt renders a page of bounded size (its tokens page separately).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import jinja2
import orjson

from roost.rollout.store.browse_rows import CallRow, CallTiming
from roost.rollout.store.program_times import ProgramTimes

from .templates import TEMPLATES

TEXT_LIMIT = 4000
IMAGE_ADDRESS = re.compile(r"sha256:([0-9a-f]{64})")
IMAGE_DATA_URL = re.compile(r"data:image/(png|jpeg|gif|webp);base64,")
MESSAGE_LIMIT = 200
SHOWN_WAIT_MS = 1.0  # a call held or paused less than this went at once: its line says nothing of it


@dataclass
class ToolCallView:
    name: str
    arguments: str


@dataclass
class MessageView:
    role: str
    text: str
    name: str | None = None
    reasoning: str = ""
    tool_calls: list[ToolCallView] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    """Where each image of the message shows from: `/images/{sha256}` (the store keeps its bytes),
    or the data URL a pass-through call recorded as sent."""


@dataclass
class TreeNode:
    call: CallRow
    parent_seq: int | None = None
    children: list[TreeNode] = field(default_factory=list)


def fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


class Renderer:
    """The jinja2 environment of the viewer's templates."""

    def __init__(self) -> None:
        self.env = jinja2.Environment(
            loader=jinja2.DictLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined
        )
        self.env.globals["fmt"] = fmt

    def render(self, name: str, *, title: str, notes: list[str] | None = None, **context: Any) -> str:
        return self.env.get_template(name).render(title=title, notes=notes or [], **context)


def messages(request: dict[str, Any]) -> tuple[list[MessageView], list[str]]:
    """The request's messages (or its prompt, for a completions call), and notes on what was cut."""
    raw = request.get("messages")
    if not isinstance(raw, list) and isinstance(request.get("input"), (list, str)):  # a Responses call
        given = request["input"]
        raw = [{"role": "user", "content": given}] if isinstance(given, str) else [i for i in given if "role" in i]
    if not isinstance(raw, list):
        prompt = request.get("prompt")
        return (
            [MessageView("prompt", _cut(prompt if isinstance(prompt, str) else _json(prompt)))]
            if prompt is not None
            else []
        ), []
    notes = [f"showing the last {MESSAGE_LIMIT} of {len(raw)} messages"] if len(raw) > MESSAGE_LIMIT else []
    return [message_view(m) for m in raw[-MESSAGE_LIMIT:] if isinstance(m, dict)], notes


def message_view(m: dict[str, Any]) -> MessageView:
    return MessageView(
        str(m.get("role", "?")),
        _cut(_content_text(m.get("content"))),
        m.get("name"),
        _cut(str(m.get("reasoning_content") or "")),
        _tool_calls(m.get("tool_calls")),
        image_sources(m.get("content")),
    )


def image_sources(value: Any) -> list[str]:
    """The images in recorded content, in order. A token engine's call stores each image part with
    its data replaced by `sha256:<hex>` on every wire (chat `image_url`, Messages `image`,
    Responses `input_image`); a pass-through call keeps the data URL it sent."""
    if isinstance(value, str):
        if match := IMAGE_ADDRESS.fullmatch(value):
            return [f"/images/{match.group(1)}"]
        return [value] if IMAGE_DATA_URL.match(value) else []
    if isinstance(value, dict):
        return [src for v in value.values() for src in image_sources(v)]
    if isinstance(value, list):
        return [src for v in value for src in image_sources(v)]
    return []


def reply_view(response: dict[str, Any]) -> MessageView:
    message = response.get("message")
    if isinstance(message, dict):
        return message_view({"role": "assistant", **message})
    return MessageView("assistant", _cut(str(response.get("text") or "")))


def trees(agents: list[tuple[str, str | None]], calls: list[CallRow]) -> list[tuple[str, str | None, list[TreeNode]]]:
    """Per agent, its calls as a tree by `parent_call_id` (extends chain, forks branch)."""
    nodes = {c.call_id: TreeNode(c) for c in calls}
    roots: dict[str, list[TreeNode]] = {}
    for c in calls:
        parent = nodes.get(c.parent_call_id or "")
        if parent is not None:
            nodes[c.call_id].parent_seq = parent.call.seq
            parent.children.append(nodes[c.call_id])
        else:
            roots.setdefault(c.agent_id, []).append(nodes[c.call_id])
    known = dict(agents)
    names = list(known) + [a for a in roots if a not in known]
    return [
        (a, known.get(a) or next((c.parent_agent for c in calls if c.agent_id == a), None), roots.get(a, []))
        for a in names
    ]


def time_rows(p: ProgramTimes) -> list[tuple[str, str, str]]:
    """A session's time table: each part, its milliseconds and its share of the wall time (the
    calls of agents running at once overlap, so the parts may add up to more)."""
    parts = [
        ("engine", p.engine_ms),
        (f"· prefill ({p.split_calls} of {p.calls} calls)", p.prefill_ms),
        (f"· decode ({p.split_calls} of {p.calls} calls)", p.decode_ms),
        ("held for admission", p.held_ms),
        ("paused (weight update)", p.paused_ms),
        ("tools (no call in flight)", p.tool_ms),
        ("wall", p.wall_ms),
    ]
    return [(name, _ms(ms), _share(ms, p.wall_ms)) for name, ms in parts]


def call_times(timed: list[CallTiming]) -> dict[str, str]:
    """Per call, its held, paused, prefill and decode time where it recorded them (a line of the tree)."""
    out = {}
    for call in timed:
        t = call.timings
        waits = [(name, t.get(f"{name}_ms", 0.0)) for name in ("held", "paused")]
        parts = [f"{name} {_ms(ms)}" for name, ms in waits if ms >= SHOWN_WAIT_MS]
        if "prefill_ms" in t:
            parts += [f"prefill {_ms(t['prefill_ms'])}", f"decode {_ms(t['decode_ms'])}"]
        out[call.call_id] = " · ".join(parts)
    return out


def _ms(ms: float | None) -> str:
    return "–" if ms is None else f"{ms:.1f} ms"


def _share(ms: float | None, wall_ms: float) -> str:
    return "–" if ms is None or wall_ms <= 0 else f"{100 * ms / wall_ms:.0f}%"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: text, images, ...
        return "\n".join(
            str(p.get("text", f"[{p.get('type', 'part')}]")) if isinstance(p, dict) else str(p) for p in content
        )
    return "" if content is None else _json(content)


def _tool_calls(raw: Any) -> list[ToolCallView]:
    out = []
    for call in raw if isinstance(raw, list) else []:
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        args = fn.get("arguments", "")
        out.append(ToolCallView(str(fn.get("name", "?")), _cut(args if isinstance(args, str) else _json(args))))
    return out


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + f" … [{len(text) - TEXT_LIMIT} more characters]"


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()
