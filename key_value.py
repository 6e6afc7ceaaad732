"""`KEY=VALUE` pairs from a command line (`--env-arg`, `--agent-arg`, a recipe's `--set`), their
values in one syntax: YAML, as recipes are written, which takes JSON as well.

YAML 1.1 reads `1e-5` as a string (its floats need a dot); the loader here reads it as JSON and
YAML 1.2 do, so a value typed as JSON means the same in every flag.
"""

from __future__ import annotations

import re
from typing import Any

import yaml


class KeyValueError(ValueError):
    """A pair with no `=` or no key, or a value that is not YAML."""


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_pair(pair: str) -> tuple[str, Any]:
    """`KEY=VALUE` → (KEY stripped, VALUE as YAML; an empty VALUE is None)."""
    key, sep, raw = pair.partition("=")
    key = key.strip()
    if not sep or not key:
        raise KeyValueError(f"{pair!r} is not KEY=VALUE")
    try:
        return key, yaml.load(raw, Loader=_Loader)  # _Loader is a SafeLoader
    except yaml.YAMLError as exc:
        raise KeyValueError(
            f"{pair!r}: the value is not valid YAML (quote a string that is meant as text): {exc}"
        ) from exc
