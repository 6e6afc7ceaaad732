"""What an agent's action may hold, checked before env code (or a worker's pickle) sees it.

Tool-call arguments are JSON a model wrote, and Python cannot take every JSON text apart:
a structure nested ~1,000 deep overflows its recursion limit, an integer of more than
4,300 digits cannot become text again, and NaN or 1e400 are not numbers an env can
compare. Past these limits the action is the agent's error (`InvalidActionError`: 422,
scored like any invalid action), never an environment fault.
"""

from __future__ import annotations

import json
import math
import re
from functools import partial
from itertools import accumulate
from typing import Any

from roost.envs.errors import InvalidActionError

MAX_DEPTH = 64
"""Levels of nested arrays and objects; `{}` is one. Tool schemas need a handful."""
MAX_INT_DIGITS = 4300
"""Python's default `sys.get_int_max_str_digits()`: a longer int cannot be printed or parsed."""

_INT_BOUND = 10**MAX_INT_DIGITS
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")
_LEVEL = {"[": 1, "{": 1, "]": -1, "}": -1}


def load_json(text: str, what: str, *, enclosing: int = 0) -> Any:
    """`json.loads` within the limits; `what` names the value in messages (`"arguments of tool
    'act'"`), and `enclosing` counts the levels of `text` around it (a step body wraps the
    arguments in two objects). Malformed JSON raises `json.JSONDecodeError` as usual."""
    depth = _text_depth(text) - enclosing
    if depth > MAX_DEPTH:
        raise InvalidActionError(f"{what} nest {depth} deep; at most {MAX_DEPTH} levels are accepted")
    return json.loads(text, parse_int=partial(_int, what), parse_float=partial(_float, what),
                      parse_constant=partial(_constant, what))


def check_json(value: Any, what: str) -> None:
    """Raise `InvalidActionError` unless `value` is JSON data (dicts with string keys, lists,
    strings, finite numbers, booleans, None) within the limits."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth > MAX_DEPTH:
                raise InvalidActionError(f"{what} nest more than {MAX_DEPTH} levels deep; "
                                         f"at most {MAX_DEPTH} are accepted")
            if isinstance(item, dict):
                if not all(isinstance(key, str) for key in item):
                    raise InvalidActionError(f"{what} have an object key that is not a string")
                item = item.values()
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, bool) or item is None or isinstance(item, str):
            continue
        elif isinstance(item, int):
            if abs(item) >= _INT_BOUND:
                raise InvalidActionError(f"{what} hold an integer of more than {MAX_INT_DIGITS:,} digits; "
                                         f"at most {MAX_INT_DIGITS:,} are accepted")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidActionError(f"{what} hold {item}; only finite numbers are accepted")
        else:
            raise InvalidActionError(f"{what} hold a {type(item).__name__}, which is not JSON data")


def _text_depth(text: str) -> int:
    """The deepest nesting of brackets outside strings, without parsing (which would recurse)."""
    brackets = _BRACKET.findall(_STRING.sub("", text))
    return max(accumulate(map(_LEVEL.__getitem__, brackets)), default=0)


def _int(what: str, digits: str) -> int:
    count = len(digits.lstrip("-"))
    if count > MAX_INT_DIGITS:
        raise InvalidActionError(f"{what} hold an integer of {count:,} digits; at most {MAX_INT_DIGITS:,} are accepted")
    return int(digits)


def _float(what: str, text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InvalidActionError(f"{what} hold {text[:40]}, a number past the float range; "
                                 "only finite numbers are accepted")
    return value


def _constant(what: str, name: str) -> float:
    raise InvalidActionError(f"{what} hold {name}, which JSON does not allow; only finite numbers are accepted")
