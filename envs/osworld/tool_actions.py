"""The desktop actions as OpenAI function tools, for tool-calling harnesses.

Each tool call becomes computer_13 dicts (so it is checked and run exactly as that space
is): `click` → CLICK, `type` → TYPING, `drag` → MOVE_TO then DRAG_TO, `wait`/`done`/
`fail` → WAIT/DONE/FAIL. `pyautogui` (code) is handled by `actions.parse`. Coordinates are
screen pixels, as the accessibility tree's `position` and `size` columns give them.
"""

from __future__ import annotations

from typing import Any

from roost.envs.errors import InvalidActionError
from roost.envs.protocol import ToolCall, ToolSchema

_XY = {
    "x": {"type": "number", "description": "Screen x in pixels (0 = left edge)."},
    "y": {"type": "number", "description": "Screen y in pixels (0 = top edge)."},
}
_BUTTON = {"type": "string", "enum": ["left", "right", "middle"], "description": "Mouse button (default left)."}

# name → (description, properties, required)
_TOOLS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "click": (
        "Click at a screen position.",
        {
            **_XY,
            "button": _BUTTON,
            "clicks": {"type": "integer", "enum": [1, 2, 3], "description": "Number of clicks (default 1)."},
        },
        ["x", "y"],
    ),
    "double_click": ("Double-click at a screen position.", _XY, ["x", "y"]),
    "right_click": ("Right-click at a screen position (opens context menus).", _XY, ["x", "y"]),
    "move": ("Move the mouse pointer to a screen position.", _XY, ["x", "y"]),
    "drag": (
        "Press the left button at (from_x, from_y), move to (to_x, to_y) and release.",
        {"from_x": _XY["x"], "from_y": _XY["y"], "to_x": _XY["x"], "to_y": _XY["y"]},
        ["from_x", "from_y", "to_x", "to_y"],
    ),
    "scroll": (
        "Turn the mouse wheel, optionally after moving to (x, y). dy > 0 scrolls up, dx > 0 right.",
        {
            "dy": {"type": "integer", "description": "Wheel clicks up (negative: down)."},
            "dx": {"type": "integer", "description": "Wheel clicks right (negative: left)."},
            **_XY,
        },
        [],
    ),
    "type": (
        "Type text at the keyboard focus ('\\n' presses Enter).",
        {"text": {"type": "string", "description": "The text to type."}},
        ["text"],
    ),
    "key": (
        "Press and release one key, e.g. 'enter', 'tab', 'esc', 'backspace', 'f5', 'a'.",
        {"key": {"type": "string", "description": "A pyautogui key name."}},
        ["key"],
    ),
    "hotkey": (
        "Press a key combination, e.g. ['ctrl', 's'] (held in order, released in reverse).",
        {"keys": {"type": "array", "items": {"type": "string"}, "minItems": 1, "description": "pyautogui key names."}},
        ["keys"],
    ),
    "wait": ("Do nothing for a moment (let the screen settle).", {}, []),
    "done": ("Declare the task finished; the episode ends and is scored.", {}, []),
    "fail": ("Declare the task impossible to do; the episode ends (infeasible tasks want this).", {}, []),
    "pyautogui": (
        "Run Python code that acts with pyautogui (imported; the screen is the desktop's).",
        {"code": {"type": "string", "description": "Python code, e.g. pyautogui.click(10, 20)."}},
        ["code"],
    ),
}
_SPECIAL = {"wait": "WAIT", "done": "DONE", "fail": "FAIL"}


def tools() -> list[ToolSchema]:
    return [
        {
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
        for name, (description, properties, required) in _TOOLS.items()
    ]


def tool_arguments(call: ToolCall) -> dict[str, Any]:
    """The call's arguments, checked against the tool's required and known names."""
    if call.name not in _TOOLS:
        raise InvalidActionError(f"unknown tool {call.name!r}; the desktop's tools are {', '.join(_TOOLS)}")
    _, properties, required = _TOOLS[call.name]
    args = call.parsed_arguments()
    missing, unknown = set(required) - set(args), set(args) - set(properties)
    if missing or unknown:
        raise InvalidActionError(
            f"tool {call.name!r} takes {sorted(properties) or 'no arguments'} "
            f"(required: {required or 'none'}); missing {sorted(missing)}, "
            f"unknown {sorted(unknown)}"
        )
    return args


def tool_call_actions(call: ToolCall) -> list[dict[str, Any]]:
    """The computer_13 dicts a tool call (other than `pyautogui`) stands for."""
    args = tool_arguments(call)
    name = call.name
    if name in _SPECIAL:
        return [{"action_type": _SPECIAL[name]}]
    if name == "click":
        renamed = {"num_clicks" if k == "clicks" else k: v for k, v in args.items()}
        return [{"action_type": "CLICK", **renamed}]
    if name == "drag":
        return [
            {"action_type": "MOVE_TO", "x": args["from_x"], "y": args["from_y"]},
            {"action_type": "DRAG_TO", "x": args["to_x"], "y": args["to_y"]},
        ]
    if name == "scroll":
        return _scroll(args)
    simple = {
        "double_click": "DOUBLE_CLICK",
        "right_click": "RIGHT_CLICK",
        "move": "MOVE_TO",
        "type": "TYPING",
        "key": "PRESS",
        "hotkey": "HOTKEY",
    }
    if name in simple:
        return [{"action_type": simple[name], **args}]
    raise InvalidActionError(f"tool {name!r} is not a computer_13 action")


def _scroll(args: dict[str, Any]) -> list[dict[str, Any]]:
    if ("x" in args) != ("y" in args):
        raise InvalidActionError("tool 'scroll' takes x and y together, or neither")
    wheel = {k: args[k] for k in ("dx", "dy") if k in args}
    if not wheel:
        raise InvalidActionError("tool 'scroll' needs dy (or dx): wheel clicks, dy > 0 scrolls up")
    move = [{"action_type": "MOVE_TO", "x": args["x"], "y": args["y"]}] if "x" in args else []
    return [*move, {"action_type": "SCROLL", **wheel}]
