"""Speed-ups for TextWorld's PDDL games: memoized parsing and translation, shallow context copies.

TextWorld re-parses the same few strings with its tatsu grammars over and over: every
admissible command's template on every step, every rule's condition, and the whole domain
and text grammar on every game load; and it translates a game's PDDL problem with
fast-downward four times a reset (twice on load, twice on reset). Measured on the demo's
games (2 cores): a step took ~31 ms and a reset ~375 ms, about 60% of it parsing, and the
env workers were the largest CPU user of an RL step. These functions are pure functions of
their arguments (`pddl2sas` also sets translator options, all of them, on every call), so
their results are cached by argument and handed out as deep copies (callers mutate them:
TextWorld sets each symbol's context after parsing).

With parsing cached, half of what was left went to deep-copying the text generator's context
for every symbol it expands. The copies' `variables` and `mapping` dicts are only ever updated
(never their values), so copying the dicts is enough.

`install()` patches both in, once per process; the games it plays are identical with and
without it (tests/envs/test_alfworld_speedups.py).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

_PARSES_KEPT = 4096
_TRANSLATIONS_KEPT = 256
"""A translation is ~40 kB; an RL group plays its game several times in a row."""
_WRAPPED = "__roost_speedup__"


def install() -> None:
    """Wrap TextWorld's grammar, logic and PDDL-domain parsers and fast-downward's PDDL
    translator with a cache, and make the text generator's context copies shallow (idempotent)."""
    import fast_downward
    import textworld.envs.pddl.logic as pddl_logic
    import textworld.envs.pddl.textgen as textgen
    import textworld.logic as logic

    for module, name, kept in (
        (textgen, "_parse_and_convert", _PARSES_KEPT),
        (logic, "_parse_and_convert", _PARSES_KEPT),
        (pddl_logic, "_parse_and_convert", _PARSES_KEPT),
        (fast_downward, "pddl2sas", _TRANSLATIONS_KEPT),
    ):
        parse = getattr(module, name)
        if not getattr(parse, _WRAPPED, False):
            setattr(module, name, cached(parse, kept))
    textgen.copy_context = copy_context


def copy_context(context: dict[str, Any]) -> dict[str, Any]:
    """TextWorld's `textgen.copy_context`, copying the two dicts it updates instead of deep-copying them."""
    return {**context, "variables": dict(context["variables"]), "mapping": dict(context["mapping"])}


def cached(parse: Callable[..., Any], kept: int = _PARSES_KEPT) -> Callable[..., Any]:
    """`parse` with its last `kept` results memoized by (args, kwargs) and returned as fresh copies."""
    remember = functools.lru_cache(maxsize=kept)(lambda args, kwargs: parse(*args, **dict(kwargs)))

    @functools.wraps(parse)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return copy.deepcopy(remember(args, tuple(sorted(kwargs.items()))))

    setattr(wrapper, _WRAPPED, True)
    return wrapper
