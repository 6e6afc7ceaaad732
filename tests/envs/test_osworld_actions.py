"""OSWorld's action spaces → desktop code: pyautogui text, computer_13 dicts (compared with OSWorld's own
controller), tool calls, and the bad input that must stay the agent's error."""

from __future__ import annotations

import json
import re

import pytest

from roost.envs.errors import InvalidActionError
from roost.envs.osworld.actions import PRELUDE, parse
from roost.envs.osworld.tool_actions import tools
from roost.envs.protocol import TextAction, ToolCall


def osworld_commands(action) -> list[str]:
    """The commands OSWorld's PythonController.execute_action sends for a computer_13 action."""
    from desktop_env.controllers.python import PythonController

    sent: list[str] = []
    controller = PythonController("127.0.0.1", 1)
    controller.execute_python_command = sent.append
    controller.execute_action(action)
    return sent


def normalised(code: str) -> str:
    return re.sub(r"\s+", "", code).replace('"', "'")


@pytest.mark.parametrize(
    "action",
    [
        {"action_type": "CLICK", "x": 10, "y": 20},
        {"action_type": "CLICK", "button": "right", "x": 10, "y": 20, "num_clicks": 2},
        {"action_type": "CLICK", "button": "middle"},
        {"action_type": "CLICK"},
        {"action_type": "MOUSE_DOWN", "button": "left"},
        {"action_type": "MOUSE_UP"},
        {"action_type": "RIGHT_CLICK", "x": 5, "y": 6},
        {"action_type": "DOUBLE_CLICK", "parameters": {"x": 5.5, "y": 6}},
        {"action_type": "DRAG_TO", "x": 100, "y": 200},
        {"action_type": "SCROLL", "dx": 0, "dy": -3},
        {"action_type": "SCROLL", "dy": 2},
        {"action_type": "TYPING", "text": 'it\'s a "quote" \\ and\nnewline'},
        {"action_type": "PRESS", "key": "enter"},
        {"action_type": "KEY_DOWN", "key": "shift"},
        {"action_type": "KEY_UP", "key": "shift"},
        {"action_type": "HOTKEY", "keys": ["ctrl", "alt", "t"]},
    ],
)
def test_computer13_runs_the_calls_osworld_runs(action):
    ours = parse(TextAction(json.dumps(action)), "computer_13")
    assert ours.kind == "code" and ours.record == action
    theirs = osworld_commands(action)
    if action["action_type"] == "DRAG_TO":  # OSWorld drags for 1 s; roost for 0.5 s
        theirs = [c.replace("duration=1.0", "duration=0.5") for c in theirs]
    assert [normalised(c) for c in ours.code.splitlines()] == [normalised(c) for c in theirs]
    compile(ours.script, "<action>", "exec")


def test_computer13_move_skips_osworlds_random_easing():
    ours = parse(TextAction('{"action_type": "MOVE_TO", "x": 3, "y": 4}'), "computer_13")
    assert ours.code == "pyautogui.moveTo(3, 4)"
    assert osworld_commands({"action_type": "MOVE_TO", "x": 3, "y": 4})[0].startswith("pyautogui.moveTo(3, 4, ")


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"action_type": "TELEPORT"}', "unknown computer_13 action_type 'TELEPORT'"),
        ('{"action_type": "CLICK", "x": 1}', "x and y together"),
        ('{"action_type": "CLICK", "x": "1); import os; (", "y": 2}', "x must be float"),
        ('{"action_type": "CLICK", "x": 1, "y": 2, "button": "fourth"}', "button must be one of"),
        ('{"action_type": "CLICK", "x": 1, "y": 2, "num_clicks": 7}', "num_clicks must be one of"),
        ('{"action_type": "CLICK", "x": 99999, "y": 2}', "outside [0, 1920]"),
        ('{"action_type": "PRESS", "key": "\')\\nimport os\\n(\'"}', "not one of pyautogui's key names"),
        ('{"action_type": "HOTKEY", "keys": "ctrl+s"}', "keys must be list"),
        ('{"action_type": "TYPING"}', "needs the parameter 'text'"),
        ('{"action_type": "TYPING", "text": "a", "speed": 2}', "not ['speed']"),
        ('{"action_type": "SCROLL"}', "SCROLL needs dx, dy or both"),
        ("[1, 2]", "a JSON object"),
        ("click here", "not JSON"),
    ],
)
def test_bad_computer13_actions_are_the_agents_error(text, message):
    with pytest.raises(InvalidActionError, match=re.escape(message)):
        parse(TextAction(text), "computer_13")


@pytest.mark.parametrize("space", ["pyautogui", "computer_13"])
@pytest.mark.parametrize("text", ["WAIT", " done\n", "FAIL"])
def test_specials_in_both_spaces(space, text):
    action = parse(TextAction(text), space)
    assert action.kind == text.strip().upper() and action.record == text.strip().upper() and action.code == ""


def test_pyautogui_code_as_given_and_fenced():
    code = "pyautogui.click(10, 20)\npyautogui.typewrite('a<b')"
    assert parse(TextAction(code), "pyautogui").code == code
    assert parse(TextAction(f"```python\n{code}\n```"), "pyautogui").code == code
    assert parse(TextAction(code), "pyautogui").script.startswith(
        "import pyautogui; import time; pyautogui.FAILSAFE = False\n"
    )
    assert parse(TextAction(code), "pyautogui").script.endswith(code)


@pytest.mark.parametrize(
    "code, where",
    [
        ("pyautogui.click(10, 20", "line 1"),
        ("x = 1\nif x\n    pass", "line 2"),
        ("a\x00b", None),
        ("   ", None),
    ],
)
def test_a_syntax_error_is_an_invalid_action_that_says_so(code, where):
    with pytest.raises(InvalidActionError) as raised:
        parse(TextAction(code), "pyautogui")
    message = str(raised.value)
    assert ("empty" in message) if not code.strip() else ("not valid Python" in message and "nothing ran" in message)
    if where:
        assert "SyntaxError" in message and where in message


def test_the_prelude_compiles_and_fixes_less_than():
    namespace: dict = {}
    calls: list = []

    class FakeModule:  # stands in for the pyautogui module only to record what the prelude routes where
        FAILSAFE = True

        @staticmethod
        def typewrite(message, *args, **kwargs):
            calls.append(("typewrite", message))

        press = staticmethod(lambda key, **kwargs: calls.append(("press", key)))
        hotkey = staticmethod(lambda *keys: calls.append(("hotkey", keys)))

    import sys

    sys.modules["pyautogui"], saved = FakeModule, sys.modules.get("pyautogui")
    try:
        exec(PRELUDE + "pyautogui.write('a<b'); pyautogui.press('<'); pyautogui.typewrite(['enter'])", namespace)
    finally:
        if saved is None:
            del sys.modules["pyautogui"]
        else:
            sys.modules["pyautogui"] = saved
    assert calls == [
        ("typewrite", "a"),
        ("hotkey", ("shift", ",")),
        ("typewrite", "b"),
        ("hotkey", ("shift", ",")),
        ("typewrite", ["enter"]),
    ]
    assert FakeModule.FAILSAFE is False


@pytest.mark.parametrize(
    "call, code",
    [
        (ToolCall("click", {"x": 1, "y": 2}), "pyautogui.click(x=1, y=2)"),
        (
            ToolCall("click", '{"x": 1, "y": 2, "button": "right", "clicks": 2}'),
            "pyautogui.click(button='right', x=1, y=2, clicks=2)",
        ),
        (ToolCall("double_click", {"x": 1, "y": 2}), "pyautogui.doubleClick(x=1, y=2)"),
        (ToolCall("right_click", {"x": 1, "y": 2}), "pyautogui.rightClick(x=1, y=2)"),
        (ToolCall("move", {"x": 1, "y": 2}), "pyautogui.moveTo(1, 2)"),
        (
            ToolCall("drag", {"from_x": 1, "from_y": 2, "to_x": 3, "to_y": 4}),
            "pyautogui.moveTo(1, 2)\npyautogui.dragTo(3, 4, duration=0.5, button='left', mouseDownUp=True)",
        ),
        (ToolCall("scroll", {"dy": -2, "x": 5, "y": 6}), "pyautogui.moveTo(5, 6)\npyautogui.vscroll(-2)"),
        (ToolCall("type", {"text": "hi\n"}), "pyautogui.typewrite('hi\\n')"),
        (ToolCall("key", {"key": "Enter"}), "pyautogui.press('Enter')"),
        (ToolCall("hotkey", {"keys": ["ctrl", "s"]}), "pyautogui.hotkey('ctrl', 's')"),
        (ToolCall("pyautogui", {"code": "pyautogui.press('a')"}), "pyautogui.press('a')"),
    ],
)
def test_tool_calls_become_code(call, code):
    action = parse(call, "pyautogui")
    assert action.kind == "code" and action.code == code
    assert parse(call, "computer_13").code == code


@pytest.mark.parametrize("name, kind", [("wait", "WAIT"), ("done", "DONE"), ("fail", "FAIL")])
def test_special_tools(name, kind):
    assert parse(ToolCall(name, "{}"), "pyautogui").kind == kind


@pytest.mark.parametrize(
    "call, message",
    [
        (ToolCall("teleport", {}), "unknown tool 'teleport'"),
        (ToolCall("click", {"x": 1}), "missing ['y']"),
        (ToolCall("click", {"x": 1, "y": 2, "z": 3}), "unknown ['z']"),
        (ToolCall("click", "{not json"), "not valid JSON"),
        (ToolCall("key", {"key": "hyperdrive"}), "not one of pyautogui's key names"),
        (ToolCall("scroll", {}), "needs dy"),
        (ToolCall("pyautogui", {"code": "def ("}), "not valid Python"),
        (ToolCall("pyautogui", {"code": 5}), "as a string"),
    ],
)
def test_bad_tool_calls(call, message):
    with pytest.raises(InvalidActionError, match=re.escape(message)):
        parse(call, "pyautogui")


def test_tool_schemas_cover_the_plan():
    names = [t["function"]["name"] for t in tools()]
    assert set(names) >= {
        "click",
        "double_click",
        "right_click",
        "type",
        "hotkey",
        "key",
        "scroll",
        "drag",
        "move",
        "wait",
        "done",
        "fail",
    }
    for tool in tools():
        parameters = tool["function"]["parameters"]
        assert parameters["type"] == "object" and parameters["additionalProperties"] is False
        assert set(parameters["required"]) <= set(parameters["properties"])
