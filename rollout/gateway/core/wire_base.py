"""What every wire model of the gateway is made of: strict models (`Wire`: unknown fields are a 400
naming them) and lenient ones for the parts harnesses grow faster than this gateway learns."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Discriminator


class Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Lenient(BaseModel):
    """A part of a request that harnesses grow faster than this gateway learns (Claude Code's and
    Codex's top level, hosted tools, new item types): fields it does not know are kept
    (`model_extra`) and noted with the call (request_notes.py) instead of refused."""

    model_config = ConfigDict(extra="allow")


def tagged(known: tuple[str, ...], default: str | None) -> Discriminator:
    """A union's discriminator: the value's `type` (`default` where it has none) where that is
    one of `known`, else `other`, the tag of the union's `Lenient` member."""

    def tag(value: Any) -> str:
        kind = value.get("type", default) if isinstance(value, dict) else getattr(value, "type", default)
        return str(kind) if kind in known else "other"

    return Discriminator(tag)
