"""Bounds on the JSON a roost server takes in, one set for the gateway and the env servers.

Python cannot take every JSON text apart: a structure nested ~1,000 deep overflows its
recursion limit, an integer of more than 4,300 digits cannot become text again, and NaN or
1e400 are not numbers anyone can compare. The gateway's store writes JSON with orjson, which
also refuses integers past 64 bits and nesting past 254 levels, and keeps rewards as SQLite
REALs. A value past these bounds is refused as the caller's error, naming it, instead of
failing later as a server fault. Each server raises its own error type (`error=`): the env
servers an `InvalidActionError`, the gateway a 400 from `out_of_bounds`'s answer.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from functools import partial
from itertools import accumulate
from typing import Any

from pydantic import BaseModel

MAX_DEPTH = 64
"""Levels of nested arrays and objects (`{}` is one) in a tool call's arguments, for the gateway
and the env servers alike; tool schemas need a handful, and deeper ones make comparing or
re-rendering them recurse past what Python and orjson allow."""
MAX_INT_DIGITS = 4300
"""Python's default `sys.get_int_max_str_digits()`: a longer int cannot be printed or parsed."""
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""What the engine and the gateway's store hold."""


class JsonBoundsError(ValueError):
    """JSON past the bounds, where the caller names no error type of its own."""


ErrorType = Callable[[str], Exception]

_INT_BOUND = 10**MAX_INT_DIGITS
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")
_LEVEL = {"[": 1, "{": 1, "]": -1, "}": -1}
# A JSON number past 64 bits or the float range shows in its text as a run of 19 digits (2**63
# has 19), an exponent of three digits (1e400), NaN or Infinity: after mapping digits to 0 and E
# to e, one of these substrings. Searching the bytes for them costs a small part of a walk.
_SHAPES = bytes.maketrans(b"123456789E", b"000000000e")
_SUSPECTS = (b"0" * 19, b"e000", b"e+000", b"NaN", b"Infinity")


def load_json(text: str, what: str, *, enclosing: int = 0, error: ErrorType = JsonBoundsError) -> Any:
    """`json.loads` within the bounds; `what` names the value in messages (`"arguments of tool
    'act'"`), and `enclosing` counts the levels of `text` around it (a step body wraps the
    arguments in two objects). Past a bound raises `error`; malformed JSON raises
    `json.JSONDecodeError` as usual."""
    depth = text_depth(text) - enclosing
    if depth > MAX_DEPTH:
        raise error(f"{what} nest {depth} deep; at most {MAX_DEPTH} levels are accepted")
    return json.loads(
        text,
        parse_int=partial(_int, what, error),
        parse_float=partial(_float, what, error),
        parse_constant=partial(_constant, what, error),
    )


def check_json(value: Any, what: str, *, error: ErrorType = JsonBoundsError) -> None:
    """Raise `error` unless `value` is JSON data (dicts with string keys, lists, strings, finite
    numbers, booleans, None) within the bounds."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth > MAX_DEPTH:
                raise error(f"{what} nest more than {MAX_DEPTH} levels deep; at most {MAX_DEPTH} are accepted")
            if isinstance(item, dict):
                if not all(isinstance(key, str) for key in item):
                    raise error(f"{what} have an object key that is not a string")
                item = item.values()
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, bool) or item is None or isinstance(item, str):
            continue
        elif isinstance(item, int):
            if abs(item) >= _INT_BOUND:
                raise error(
                    f"{what} hold an integer of more than {MAX_INT_DIGITS:,} digits; "
                    f"at most {MAX_INT_DIGITS:,} are accepted"
                )
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise error(f"{what} hold {item}; only finite numbers are accepted")
        else:
            raise error(f"{what} hold a {type(item).__name__}, which is not JSON data")


def out_of_bounds(request: BaseModel, body: bytes) -> tuple[str, str] | None:
    """Where `request` (validated from the JSON `body`) holds an integer past signed 64 bits or
    a number that is not finite: (dotted path, what is wrong there); None if nowhere."""
    shapes = body.translate(_SHAPES)
    if not any(suspect in shapes for suspect in _SUSPECTS):
        return None
    for where, item, _ in _nodes(request):
        if isinstance(item, bool):
            continue
        if isinstance(item, int) and not INT64_MIN <= item <= INT64_MAX:
            return where, (
                f"{_integer(item)} is past the signed 64-bit range ({INT64_MIN} to {INT64_MAX}) "
                "that the engine and the store hold"
            )
        if isinstance(item, float) and not math.isfinite(item):
            return where, f"{item} is not a finite number; send a finite one"
    return None


def nesting(value: Any) -> int:
    """How many levels of arrays and objects `value` nests (walked without recursion)."""
    return max((depth for _, item, depth in _nodes(value) if isinstance(item, dict | list)), default=0)


def text_depth(text: str) -> int:
    """The deepest nesting of brackets outside strings, without parsing (which would recurse)."""
    brackets = _BRACKET.findall(_STRING.sub("", text))
    return max(accumulate(map(_LEVEL.__getitem__, brackets)), default=0)


def _nodes(value: Any) -> Iterator[tuple[str, Any, int]]:
    """Every node with its dotted path and how many containers hold it (plus one if it is one)."""
    stack = [("", value, 1)]
    while stack:
        where, item, depth = stack.pop()
        yield where, item, depth
        if isinstance(item, BaseModel):
            children = ((name, getattr(item, name)) for name in item.model_fields_set)
        elif isinstance(item, dict):
            children = item.items()
        elif isinstance(item, list | tuple):
            children = enumerate(item)
        else:
            continue
        inner = depth + (not isinstance(item, BaseModel))
        stack.extend((f"{where}.{key}" if where else str(key), child, inner) for key, child in children)


def _integer(value: int) -> str:
    text = str(value)  # the JSON parser takes at most 4,300 digits, which str() can print
    return text if len(text) <= 30 else f"an integer of {len(text):,} digits"


def _int(what: str, error: ErrorType, digits: str) -> int:
    count = len(digits.lstrip("-"))
    if count > MAX_INT_DIGITS:
        raise error(f"{what} hold an integer of {count:,} digits; at most {MAX_INT_DIGITS:,} are accepted")
    return int(digits)


def _float(what: str, error: ErrorType, text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise error(f"{what} hold {text[:40]}, a number past the float range; only finite numbers are accepted")
    return value


def _constant(what: str, error: ErrorType, name: str) -> float:
    raise error(f"{what} hold {name}, which JSON does not allow; only finite numbers are accepted")
