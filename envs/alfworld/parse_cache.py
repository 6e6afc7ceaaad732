"""Memoized parsing for TextWorld's PDDL games.

TextWorld re-parses the same few strings with its tatsu grammars over and over: every
admissible command's template on every step, every rule's condition, and the whole domain
and text grammar on every game load. Measured on the demo's games (2 cores): a step took
~31 ms and a reset ~375 ms, about 60% of it in those parsers, and the env workers were the
largest CPU user of an RL step. The parsers are pure functions of their arguments, so their
results are cached by argument and handed out as deep copies (callers mutate them: TextWorld
sets each symbol's context after parsing).

`install()` wraps the three parse functions in place, once per process; the games it plays
are identical with and without it (tests/envs/test_alfworld_parse_cache.py).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

_MAX_ENTRIES = 4096
_WRAPPED = "__roost_parse_cache__"


def install() -> None:
    """Wrap TextWorld's grammar, logic and PDDL-domain parsers with a cache (idempotent)."""
    import textworld.envs.pddl.logic as pddl_logic
    import textworld.envs.pddl.textgen as textgen
    import textworld.logic as logic

    for module in (textgen, logic, pddl_logic):
        parse = module._parse_and_convert
        if not getattr(parse, _WRAPPED, False):
            module._parse_and_convert = cached(parse)


def cached(parse: Callable[..., Any]) -> Callable[..., Any]:
    """`parse` with results memoized by (args, kwargs) and returned as fresh copies."""
    remember = functools.lru_cache(maxsize=_MAX_ENTRIES)(
        lambda args, kwargs: parse(*args, **dict(kwargs)))

    @functools.wraps(parse)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return copy.deepcopy(remember(args, tuple(sorted(kwargs.items()))))

    setattr(wrapper, _WRAPPED, True)
    return wrapper
