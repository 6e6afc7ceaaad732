"""OSWorld's computer_13 action dicts → pyautogui code, checked against OSWorld's ACTION_SPACE.

The translation follows OSWorld's `PythonController.execute_action` call for call, with
two deliberate differences: moves take no randomised easing/duration (steps stay fast
and reproducible), and every value is checked (type, range, key names) and written with
`repr`, so a dict cannot smuggle code in. Parameters may be flat
(`{"action_type": "CLICK", "x": 1, "y": 2}`) or under `"parameters"`, as OSWorld accepts.
"""

from __future__ import annotations

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
    if spec is None or kind not in _KINDS:
        known = ", ".join(s["action_type"] for s in action_space())
        raise InvalidActionError(f"unknown computer_13 action_type {kind!r}; expected one of {known}")
    params = action["parameters"] if "parameters" in action else {k: v for k, v in action.items() if k != "action_type"}
    if not isinstance(params, dict):
        raise InvalidActionError(f"'parameters' of {kind} must be an object, got {params!r:.200}")
    _check(kind, spec.get("parameters", {}), params)
    return _code(kind, params)


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
    ok = (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and (expected is float or isinstance(value, int))
        if numeric
        else isinstance(value, expected)
    )
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
        raise InvalidActionError(
            f"{kind}: {key!r:.50} is not one of pyautogui's key names (KEYBOARD_KEYS), e.g. 'enter', 'ctrl', 'a', 'f5'"
        )


# action_type → (pyautogui function, positional parameters, keyword parameters), as OSWorld calls them
_CALLS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "MOVE_TO": ("moveTo", ("x", "y"), ()),
    "CLICK": ("click", (), ("button", "x", "y", "num_clicks")),
    "MOUSE_DOWN": ("mouseDown", (), ("button",)),
    "MOUSE_UP": ("mouseUp", (), ("button",)),
    "RIGHT_CLICK": ("rightClick", (), ("x", "y")),
    "DOUBLE_CLICK": ("doubleClick", (), ("x", "y")),
    "TYPING": ("typewrite", ("text",), ()),
    "PRESS": ("press", ("key",), ()),
    "KEY_DOWN": ("keyDown", ("key",), ()),
    "KEY_UP": ("keyUp", ("key",), ()),
}
_KEYWORDS = {"num_clicks": "clicks"}


def _call(kind: str, params: Params) -> str:
    function, positional, keywords = _CALLS[kind]
    args = [repr(params[name]) for name in positional]
    args += [f"{_KEYWORDS.get(name, name)}={params[name]!r}" for name in keywords if name in params]
    return f"pyautogui.{function}({', '.join(args)})"


def _code(kind: str, params: Params) -> str:
    if kind == "DRAG_TO":
        return f"pyautogui.dragTo({params['x']!r}, {params['y']!r}, duration=0.5, button='left', mouseDownUp=True)"
    if kind == "SCROLL":
        return "\n".join(
            f"pyautogui.{call}({params[name]!r})"
            for name, call in (("dx", "hscroll"), ("dy", "vscroll"))
            if name in params
        )
    if kind == "HOTKEY":
        return f"pyautogui.hotkey({', '.join(repr(k) for k in params['keys'])})"
    return _call(kind, params)


_KINDS = frozenset(_CALLS) | {"DRAG_TO", "SCROLL", "HOTKEY"}
