"""Which optional parts of roost are importable here (the `roost` command registers only those)."""

from __future__ import annotations

import importlib.util


def has_module(name: str) -> bool:
    """True when `name` can be imported (its parent packages included)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False
