"""The SWE env's actions: bash commands (mini-swe-agent style), file tools and submit.

A text action is a bash command. A bash command whose output starts with the line
COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT (mini-swe-agent's convention) submits, as does the
`submit` tool; the rest of that output is taken as the patch when it is one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roost.envs.errors import InvalidActionError
from roost.envs.protocol import Action, TextAction, ToolSchema

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> ToolSchema:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


TOOLS: list[ToolSchema] = [
    _tool(
        "bash",
        "Execute a bash command in the repository (each command runs in a new shell).",
        {"command": {"type": "string", "description": "The bash command to execute"}},
        ["command"],
    ),
    _tool(
        "read_file",
        "Read a text file; relative paths are inside the repository.",
        {
            "path": {"type": "string"},
            "start_line": {"type": "integer", "description": "First line to show (1-based)."},
            "end_line": {"type": "integer", "description": "Last line to show."},
        },
        ["path"],
    ),
    _tool(
        "write_file",
        "Create or overwrite a file with the given content.",
        {"path": {"type": "string"}, "content": {"type": "string"}},
        ["path", "content"],
    ),
    _tool(
        "str_replace",
        "Replace the one occurrence of `old` in a file with `new`.",
        {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
        ["path", "old", "new"],
    ),
    _tool(
        "submit",
        "Finish: your changes to the repository are graded by its tests.",
        {"patch": {"type": "string", "description": "Optional: a unified diff to grade instead of your changes."}},
        [],
    ),
]
TOOL_NAMES = {t["function"]["name"] for t in TOOLS}


@dataclass(frozen=True)
class Command:
    """A parsed action: the tool name and its checked arguments."""

    tool: str
    args: dict[str, Any]


def parse_action(action: Action) -> Command:
    """The action as a Command; an unknown tool or bad arguments is an InvalidActionError."""
    if isinstance(action, TextAction):
        if not action.text.strip():
            raise InvalidActionError("empty command; send a bash command or call a tool")
        return Command("bash", {"command": action.text})
    if action.name not in TOOL_NAMES:
        raise InvalidActionError(f"unknown tool {action.name!r}; the SWE env offers {sorted(TOOL_NAMES)}")
    args = action.parsed_arguments()
    schema = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == action.name)
    missing = [name for name in schema["required"] if name not in args]
    unknown = sorted(set(args) - set(schema["properties"]))
    if missing or unknown:
        raise InvalidActionError(
            f"tool {action.name!r}: missing {missing}, unknown {unknown}; it takes {sorted(schema['properties'])}"
        )
    for name, value in args.items():
        expected = schema["properties"][name]["type"]
        if (expected == "string" and not isinstance(value, str)) or (
            expected == "integer" and (not isinstance(value, int) or isinstance(value, bool))
        ):
            raise InvalidActionError(f"tool {action.name!r}: argument {name!r} must be a {expected}, got {value!r}")
    return Command(action.name, args)


def submitted_text(output: str, exit_code: int | None) -> str | None:
    """The submission carried by a bash command's output, or None if it does not submit."""
    lines = output.lstrip().splitlines(keepends=True)
    if exit_code == 0 and lines and lines[0].strip() == SUBMIT_MARKER:
        return "".join(lines[1:])
    return None


def looks_like_patch(text: str) -> bool:
    return "diff --git " in text or ("\n--- " in f"\n{text}" and "\n+++ " in text)


def clip(text: str, limit: int) -> str:
    """At most `limit` characters: the head and the tail, with a note in between."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return (
        f"{text[:half]}\n[... {len(text) - 2 * half} characters elided; narrow the command "
        f"(head, tail, grep) to see them ...]\n{text[-half:]}"
    )
