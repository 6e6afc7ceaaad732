"""Wait for a freshly configured desktop to settle before its first observation.

An application a config step launched shows its window before it registers with the
accessibility bus: Chromium takes a second or more, and a tree read before then is an empty
`<desktop-frame />`. Observed in CI: the first observation after one reset held Chromium's tree
and after another none, so two resets of the same task looked different to the agent. OSWorld's
own runner sleeps a fixed time after reset; here an empty tree is read again until it holds what
the config launched and reads the same twice in a row, within a bound, so a reset costs what the
desktop needs and no more (a tree read takes seconds for Chromium or LibreOffice under load).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from roost.envs.osworld.tasks import ConfigStep

POLL_S = 0.25
APP_STEPS = frozenset({"launch", "open", "chrome_open_tabs"})
"""Config steps after which the desktop should hold an application (a launch may also be
OSWorld's `socat` forward, which starts nothing here: then the bound ends the wait)."""
EMPTY_TREE = "<desktop-frame />"


@dataclass(frozen=True)
class Settled:
    tree: str
    """The last tree read: the first observation's (no need to read it again)."""
    stable: bool


def expects_apps(steps: list[ConfigStep]) -> bool:
    return any(step.type in APP_STEPS for step in steps)


async def settle(read_tree: Callable[[], Awaitable[str]], *, wants_apps: bool, timeout_s: float) -> Settled:
    """The tree as soon as it holds something (when `wants_apps`; else at once). A tree that was
    empty first is read once more, every `POLL_S`, until two reads in a row are equal: an app that
    just registered fills its tree in over a moment. Past `timeout_s` the desktop is observed as it
    is. A tree already there at the first read costs nothing more than the observation did."""
    deadline = time.monotonic() + timeout_s
    previous = await read_tree()
    if not (wants_apps and _empty(previous)):
        return Settled(previous, True)
    while time.monotonic() < deadline:
        await asyncio.sleep(POLL_S)
        tree = await read_tree()
        if tree == previous and not _empty(tree):
            return Settled(tree, True)
        previous = tree
    return Settled(previous, False)


def _empty(tree: str) -> bool:
    return tree.strip() == EMPTY_TREE
