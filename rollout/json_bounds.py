"""Bounds on the JSON the gateway takes in: what its store and its keys can hold.

The store writes JSON with orjson, which refuses integers past 64 bits and nesting past 254
levels, and keeps rewards and advantages as SQLite REALs; NaN and the infinities have no
JSON form at all (orjson writes them as null). A value past these bounds is refused with a
400 that names it, instead of failing as a 500 when it is stored or keyed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_ARGUMENT_DEPTH = 64
"""Levels of nested arrays and objects in a tool call's arguments (`{}` is one), as the env
servers accept them; deeper ones are not taken for a call, since comparing or re-rendering
them recurses past what Python and orjson allow."""


# A JSON number past the bounds shows in its text as a run of 19 digits (2**63 has 19), an
# exponent of three digits (1e400), NaN or Infinity: after mapping digits to 0 and E to e, one
# of these substrings. Searching the bytes for them costs a small part of walking a request.
_SHAPES = bytes.maketrans(b"123456789E", b"000000000e")
_SUSPECTS = (b"0" * 19, b"e000", b"e+000", b"NaN", b"Infinity")


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
            return where, (f"{_integer(item)} is past the signed 64-bit range ({INT64_MIN} to {INT64_MAX}) "
                           "that the engine and the store hold")
        if isinstance(item, float) and not math.isfinite(item):
            return where, f"{item} is not a finite number; send a finite one"
    return None


def nesting(value: Any) -> int:
    """How many levels of arrays and objects `value` nests (walked without recursion)."""
    return max((depth for _, item, depth in _nodes(value) if isinstance(item, dict | list)), default=0)


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
