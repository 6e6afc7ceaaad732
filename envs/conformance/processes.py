"""The processes an env leaves behind: descendants of this process that a check did not start with."""

from __future__ import annotations

import asyncio
import time

import psutil


def descendants() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


async def processes_left(before: set[int], wait_s: float = 5.0) -> list[str]:
    """Descendants of this process started during the check and still running `wait_s` after close."""
    deadline = time.monotonic() + wait_s
    while True:
        left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and _running(p)]
        if not left or time.monotonic() > deadline:
            return [f"{p.pid} ({_name(p)})" for p in left]
        await asyncio.sleep(0.1)


def _running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _name(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())[:80] or process.name()
    except psutil.Error:
        return "?"
