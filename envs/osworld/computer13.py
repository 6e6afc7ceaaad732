"""OSWorld's computer_13 action dicts → pyautogui code, checked against OSWorld's ACTION_SPACE.

The translation follows OSWorld's `PythonController.execute_action` call for call, with
two deliberate differences: moves take no randomised easing/duration (steps stay fast
and reproducible), and every value is checked (type, range, key names) and written with
`repr`, so a dict cannot smuggle code in. Parameters may be flat
(`{"action_type": "CLICK", "x": 1, "y": 2}`) or under `"parameters"`, as OSWorld accepts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from roost.envs.errors import InvalidActionError

Params = dict[str, Any]


def action_space() -> list[dict[str, Any]]:
    """OSWorld's own ACTION_SPACE (from the `desktop-env` package)."""
    from desktop_env.actions import ACTION_SPACE

    return ACTION_SPACE


def keyboard_keys() -> frozenset[str]:
    from desktop_env.actions import KEYBOARD_KEYS

    return frozenset(KEYBOARD_KEYS)


def computer13_code(action: dict[str, Any]) -> str:
    """The pyautogui code of one computer_13 action (not WAIT/FAIL/DONE, which run nothing)."""
    kind = action.get("action_type")
    spec = next((s for s in action_space() if s["action_type"] == kind), None)
    if spec is None or kind not in _CODE:
        known = ", ".join(s["action_type"] for s in action_space())
        raise InvalidActionError(f"unknown computer_13 action_type {kind!r}; expected one of {known}")
    params = action["parameters"] if "parameters" in action else {k: v for k, v in action.items() if k != "action_type"}
    if not isinstance(params, dict):
        raise InvalidActionError(f"'parameters' of {kind} must be an object, got {params!r:.200}")
    _check(kind, spec.get("parameters", {}), params)
    return _CODE[kind](params)


def _check(kind: str, spec: dict[str, Any], params: Params) -> None:
    if kind == "SCROLL":  # OSWorld's controller scrolls by dx, dy or both, though ACTION_SPACE wants both
        if not {"dx", "dy"} & set(params):
            raise InvalidActionError("SCROLL needs dx, dy or both (int: clicks of the wheel; dy > 0 scrolls up)")
        spec = {name: {**rule, "optional": True} for name, rule in spec.items()}
    unknown = set(params) - set(spec)
    if unknown:
        raise InvalidActionError(f"{kind} takes {sorted(spec) or 'no parameters'}, not {sorted(unknown)}")
    for name, rule in spec.items():
        if name not in params:
            if not rule["optional"]:
                raise InvalidActionError(f"{kind} needs the parameter {name!r} ({rule['type'].__name__})")
            continue
        _check_value(kind, name, rule, params[name])
    if ("x" in params) != ("y" in params):
        raise InvalidActionError(f"{kind} takes x and y together, or neither")


def _check_value(kind: str, name: str, rule: dict[str, Any], value: Any) -> None:
    expected, allowed = rule["type"], rule["range"]
    numeric = expected in (int, float)
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and (expected is float or isinstance(value, int))
          if numeric else isinstance(value, expected))
    if not ok:
        raise InvalidActionError(f"{kind}: {name} must be {expected.__name__}, got {value!r:.100}")
    if name == "keys":
        for key in value:
            _check_key(kind, key)
    elif name == "key":
        _check_key(kind, value)
    elif numeric and allowed is not None and len(allowed) == 2 and expected is float:
        if not allowed[0] <= value <= allowed[1]:
            raise InvalidActionError(f"{kind}: {name}={value} is outside [{allowed[0]}, {allowed[1]}]")
    elif allowed is not None and value not in allowed:
        raise InvalidActionError(f"{kind}: {name} must be one of {allowed}, got {value!r:.100}")


def _check_key(kind: str, key: Any) -> None:
    if not isinstance(key, str) or key.lower() not in keyboard_keys():
        raise InvalidActionError(f"{kind}: {key!r:.50} is not one of pyautogui's key names (KEYBOARD_KEYS), "
                                 "e.g. 'enter', 'ctrl', 'a', 'f5'")


def _args(params: Params, *names: str, rename: dict[str, str] | None = None) -> str:
    rename = rename or {}
    return ", ".join(f"{rename.get(n, n)}={params[n]!r}" for n in names if n in params)


def _click(params: Params) -> str:
    return f"pyautogui.click({_args(params, 'button', 'x', 'y', 'num_clicks', rename={'num_clicks': 'clicks'})})"


def _scroll(params: Params) -> str:
    calls = [f"pyautogui.{call}({params[name]!r})" for name, call in (("dx", "hscroll"), ("dy", "vscroll"))
             if name in params]
    return "\n".join(calls)


_CODE: dict[str, Callable[[Params], str]] = {
    "MOVE_TO": lambda p: f"pyautogui.moveTo({p['x']!r}, {p['y']!r})",
    "CLICK": _click,
    "MOUSE_DOWN": lambda p: f"pyautogui.mouseDown({_args(p, 'button')})",
    "MOUSE_UP": lambda p: f"pyautogui.mouseUp({_args(p, 'button')})",
    "RIGHT_CLICK": lambda p: f"pyautogui.rightClick({_args(p, 'x', 'y')})",
    "DOUBLE_CLICK": lambda p: f"pyautogui.doubleClick({_args(p, 'x', 'y')})",
    "DRAG_TO": lambda p: f"pyautogui.dragTo({p['x']!r}, {p['y']!r}, duration=0.5, button='left', mouseDownUp=True)",
    "SCROLL": _scroll,
    "TYPING": lambda p: f"pyautogui.typewrite({p['text']!r})",
    "PRESS": lambda p: f"pyautogui.press({p['key']!r})",
    "KEY_DOWN": lambda p: f"pyautogui.keyDown({p['key']!r})",
    "KEY_UP": lambda p: f"pyautogui.keyUp({p['key']!r})",
    "HOTKEY": lambda p: f"pyautogui.hotkey({', '.join(repr(k) for k in p['keys'])})",
}
