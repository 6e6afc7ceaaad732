"""Agent actions → shop moves: WebShop's text actions, or the equivalent tool calls.

    search[red running shoes]      ≡ tool `search` {"query": "red running shoes"}
    click[Buy Now]                 ≡ tool `click`  {"target": "Buy Now"}

The tools stay the same through an episode (what is clickable now is in the
observation and in `info["available_actions"]`), so a conversation's tool list, and
with it the prompt prefix, never changes mid-episode.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from roost.envs.errors import InvalidActionError
from roost.envs.protocol import Action, TextAction, ToolSchema

ACTION_PATTERN = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class ShopAction:
    kind: Literal["search", "click"]
    argument: str

    def __str__(self) -> str:
        return f"{self.kind}[{self.argument}]"


def tools() -> list[ToolSchema]:
    return [
        _tool(
            "search",
            "Search the shop. Only the search page (the start page, or after 'Back to Search') has a search bar.",
            "query",
            "Keywords, e.g. 'red running shoes for men'.",
        ),
        _tool(
            "click",
            "Click a button, product link (its asin) or option value on the current page, "
            "e.g. 'B09QKP7XQL', 'large', 'Next >', '< Prev', 'Description', 'Buy Now'.",
            "target",
            "The text of what to click, as the page shows it (case does not matter).",
        ),
    ]


def parse(action: Action) -> ShopAction:
    if isinstance(action, TextAction):
        match = ACTION_PATTERN.match(action.text)
        if match is None:
            raise InvalidActionError(
                f"{action.text.strip()[:200]!r} is not a WebShop action; write search[keywords] or click[button text]"
            )
        return ShopAction(match.group(1).lower(), match.group(2).strip())
    key = {"search": "query", "click": "target"}.get(action.name)
    if key is None:
        raise InvalidActionError(f"unknown tool {action.name!r}; WebShop offers 'search' and 'click'")
    args = action.parsed_arguments()
    value = args.get(key)
    if not isinstance(value, str) or set(args) - {key}:
        raise InvalidActionError(f"tool {action.name!r} takes exactly one string argument {key!r}, got {args!r}")
    return ShopAction(action.name, value.strip())


def _tool(name: str, description: str, arg: str, arg_description: str) -> ToolSchema:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {arg: {"type": "string", "description": arg_description}},
                "required": [arg],
                "additionalProperties": False,
            },
        },
    }
