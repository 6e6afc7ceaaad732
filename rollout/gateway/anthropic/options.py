"""What a Messages call's options ask of a self-hosted engine: `thinking`, `context_management`,
`output_config` and server tools, each honoured where the engine can, else noted.

- `thinking`: `disabled` renders with `enable_thinking: false`; `adaptive` and `enabled` leave
  the `<think>` block to the model, as Qwen3's template does (a `budget_tokens` is noted, not
  enforced).
- `context_management`'s `clear_thinking_20251015` is the reasoning policy of the call: `keep:
  "all"` keeps past thinking as sampled (`keep`); `{"type": "thinking_turns", "value": N}`
  clears all but the last N turns' thinking and follows the template (`drop`). Other edits
  (`clear_tool_uses_20250919`) are noted, not applied.
- `output_config.format` holds the reply to its JSON schema; `effort` is noted.
"""

from __future__ import annotations

import json
from typing import Any

from roost.rollout.gateway.anthropic.wire import ContextEdit, MessagesRequest, PromptFields, ServerTool
from roost.rollout.gateway.core.request_notes import unknown_fields
from roost.rollout.gateway.core.structured_outputs import Constraint

CLEAR_THINKING = "clear_thinking_20251015"
DEFAULT_KEPT_TURNS = 1  # Anthropic's default for clear_thinking without `keep`


def _clear_thinking(req: PromptFields) -> ContextEdit | None:
    edits = req.context_management.edits if req.context_management else []
    return next((edit for edit in edits if edit.type == CLEAR_THINKING), None)


def _kept_turns(edit: ContextEdit) -> int | None:
    """How many recent thinking turns keep their thinking; None: all of them."""
    if edit.keep == "all":
        return None
    if edit.keep is None:
        return DEFAULT_KEPT_TURNS
    value = edit.keep.get("value")
    return value if isinstance(value, int) and value >= 0 else DEFAULT_KEPT_TURNS


def reasoning_policy(req: PromptFields, session_policy: str) -> str:
    """The call's reasoning policy: what clear_thinking asks, else the session's."""
    edit = _clear_thinking(req)
    if edit is None:
        return session_policy
    return "keep" if _kept_turns(edit) is None else "drop"


def clear_thinking(req: PromptFields, dicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The template dicts with the thinking clear_thinking clears taken out of older turns."""
    edit = _clear_thinking(req)
    kept = None if edit is None else _kept_turns(edit)
    if kept is None:
        return dicts
    thinking = [i for i, m in enumerate(dicts) if m["role"] == "assistant" and "reasoning_content" in m]
    cleared = set(thinking[: len(thinking) - kept]) if kept else set(thinking)
    return [
        {k: v for k, v in m.items() if k != "reasoning_content"} if i in cleared else m for i, m in enumerate(dicts)
    ]


def output_constraint(req: MessagesRequest) -> Constraint | None:
    """`output_config.format` as the grammar the engine enforces (recorded as a response_format)."""
    fmt = req.output_config.format if req.output_config else None
    if fmt is None:
        return None
    return Constraint("response_format", "json_schema", json.dumps(fmt.schema_))


def option_notes(req: PromptFields) -> list[str]:
    """A note for each option or tool the call carries that the engine does not act on."""
    notes = unknown_fields(req, "messages")
    for i, tool in enumerate(req.tools or ()):
        if isinstance(tool, ServerTool):
            notes.append(
                f"messages: tools.{i} is Anthropic's server tool {tool.type!r} ({tool.name}), which this "
                "engine cannot run; left out of the prompt"
            )
    if req.thinking is not None and req.thinking.budget_tokens is not None:
        notes.append("messages: thinking.budget_tokens is not enforced; the reply's max_tokens bounds the thinking")
    if req.thinking is not None and req.thinking.display == "omitted":
        notes.append("messages: thinking.display 'omitted' is not honoured; thinking is returned in full")
    for edit in req.context_management.edits if req.context_management else ():
        if edit.type != CLEAR_THINKING:
            notes.append(
                f"messages: context_management edit {edit.type!r} is not applied; the conversation is rendered as sent"
            )
        notes.extend(unknown_fields(edit, f"messages: context_management edit {edit.type!r}"))
    config = req.output_config
    if config is not None:
        if config.effort is not None:
            notes.append(
                f"messages: output_config.effort {config.effort!r} has no counterpart on this engine; not acted on"
            )
        notes.extend(unknown_fields(config, "messages: output_config"))
    return notes
