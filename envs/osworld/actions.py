"""Agent actions → what the desktop runs, in OSWorld's action spaces.

    pyautogui     Python code as the agent wrote it: `pyautogui.click(120, 80)`
    computer_13   one of OSWorld's action dicts: `{"action_type": "CLICK", "x": 120, "y": 80}`
    WAIT/FAIL/DONE  plain text, in either space (and the `wait`, `fail`, `done` tools)

Tool calls (`click`, `type`, `hotkey`, ... see `tool_actions`) work in both spaces. Every
action but the three specials becomes Python code for `DesktopClient.run_python`, with
OSWorld's own prelude (`import pyautogui; import time; pyautogui.FAILSAFE = False`).
Code that does not compile is an `InvalidActionError` saying where; the episode goes on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from roost.envs.errors import InvalidActionError
from roost.envs.protocol import Action, TextAction
from roost.serving.json_bounds import load_json

from .computer13 import computer13_code
from .tool_actions import tool_arguments, tool_call_actions

ActionSpace = Literal["pyautogui", "computer_13"]
ACTION_SPACES: tuple[str, ...] = ("pyautogui", "computer_13")
SPECIALS = ("WAIT", "FAIL", "DONE")
Kind = Literal["code", "WAIT", "FAIL", "DONE"]

# OSWorld's PythonController prefixes every command with this (`pkgs_prefix`), then a helper
# that types '<' with shift+comma: pyautogui on X11 types '>' for it (OSWorld issue 257,
# which OSWorld's DesktopEnv works around by rewriting the code's typewrite/press calls).
PRELUDE = """import pyautogui; import time; pyautogui.FAILSAFE = False
def _roost_less_than(original):
    def typed(message, *args, **kwargs):
        if not isinstance(message, str) or '<' not in message:
            return original(message, *args, **kwargs)
        for i, part in enumerate(message.split('<')):
            if i:
                pyautogui.hotkey('shift', ',')
            if part:
                original(part, *args, **kwargs)
    return typed
pyautogui.typewrite = pyautogui.write = _roost_less_than(pyautogui.typewrite)
pyautogui.press = _roost_less_than(pyautogui.press)
del _roost_less_than
"""
_FENCE = re.compile(r"^\s*```(?:python|py)?\s*\n(.*?)\n?```\s*$", re.DOTALL)


@dataclass(frozen=True)
class DesktopAction:
    """One agent action, ready to run: `code` for kind "code", nothing for the specials."""

    kind: Kind
    code: str = ""
    record: Any = None
    """The action as OSWorld's `action_history` keeps it (its evaluator checks the last one for FAIL)."""

    @property
    def script(self) -> str:
        """The code with the prelude, as the desktop runs it."""
        return PRELUDE + self.code


def parse(action: Action, space: ActionSpace) -> DesktopAction:
    """The desktop action an agent's action stands for; `InvalidActionError` if it stands for none."""
    if isinstance(action, TextAction):
        text = action.text.strip()
        if text.upper() in SPECIALS:
            return DesktopAction(text.upper(), record=text.upper())
        return pyautogui_action(text) if space == "pyautogui" else computer13_action(text)
    if action.name == "pyautogui":
        code = tool_arguments(action)["code"]
        if not isinstance(code, str):
            raise InvalidActionError(f"tool 'pyautogui' takes code as a string, got {code!r:.100}")
        return pyautogui_action(code)
    return combined(tool_call_actions(action), action.name)


def pyautogui_action(text: str) -> DesktopAction:
    """Agent-written Python; a single fenced block (```python ... ```) counts as its content."""
    fenced = _FENCE.match(text)
    code = fenced.group(1) if fenced else text
    if not code.strip():
        raise InvalidActionError("the action is empty; write pyautogui code, or WAIT, FAIL or DONE")
    check_syntax(code)
    return DesktopAction("code", code, record=code)


def check_syntax(code: str) -> None:
    try:
        compile(code, "<action>", "exec")
    except SyntaxError as exc:
        where = f" at line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "") if exc.lineno else ""
        raise InvalidActionError(
            f"the action is not valid Python: SyntaxError: {exc.msg}{where}; nothing ran; send corrected pyautogui code"
        ) from None
    except ValueError as exc:  # null bytes in the source
        raise InvalidActionError(f"the action is not valid Python: {exc}; nothing ran") from None


def computer13_action(text: str) -> DesktopAction:
    """A computer_13 action given as JSON text (a fenced ```json block is accepted too)."""
    body = re.sub(r"^\s*```(?:json)?\s*|\s*```\s*$", "", text)
    try:
        value = load_json(body, "the computer_13 action", error=InvalidActionError)
    except json.JSONDecodeError as exc:
        raise InvalidActionError(
            f"the computer_13 action is not JSON ({exc.msg} at {exc.pos}): {text[:200]!r}; "
            'send one object like {"action_type": "CLICK", "x": 10, "y": 20}, '
            "or WAIT, FAIL or DONE"
        ) from None
    return computer13_dict_action(value)


def computer13_dict_action(value: Any) -> DesktopAction:
    if not isinstance(value, dict):
        raise InvalidActionError(f"a computer_13 action is a JSON object with 'action_type', got {value!r:.200}")
    kind = value.get("action_type")
    if kind in SPECIALS:
        return DesktopAction(kind, record=kind)
    return DesktopAction("code", computer13_code(value), record=value)


def combined(actions: list[dict[str, Any]], tool: str) -> DesktopAction:
    """A tool call's computer_13 dicts as one action (a drag is a move then a drag)."""
    kinds = [a["action_type"] for a in actions]
    if len(actions) == 1 and kinds[0] in SPECIALS:
        return DesktopAction(kinds[0], record=kinds[0])
    code = "\n".join(computer13_code(a) for a in actions)
    return DesktopAction("code", code, record={"tool": tool, "actions": actions})
