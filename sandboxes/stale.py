"""Leftovers of host-process sandboxes whose owner died before `close()` (a killed worker).

Each bubblewrap or local sandbox writes `owner.json` — its owner's pid and start time and its
cgroup folders — into its root folder. `sweep` frees the folders and cgroups of owners that
are gone (the start time guards against a reused pid). Backends sweep once when they start.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from .cgroups import LimitGroup

OWNER_FILE = "owner.json"


def write_owner(root: Path, group: LimitGroup | None) -> None:
    owner = {
        "pid": os.getpid(),
        "start": process_start_time(os.getpid()),
        "cgroups": None
        if group is None
        else {"version": group.version, "dirs": {k: str(v) for k, v in group.dirs.items()}},
    }
    (root / OWNER_FILE).write_text(json.dumps(owner))


def sweep(prefix: str) -> int:
    """Remove the sandboxes named `prefix*` in the temp folder whose owner is gone; how many."""
    from .overlay import remove_tree

    removed = 0
    for root in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        try:
            owner = json.loads((root / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # still being set up, or not ours
        if process_start_time(owner.get("pid", -1)) == owner.get("start"):
            continue
        groups = owner.get("cgroups")
        if groups:
            LimitGroup(groups["version"], {k: Path(v) for k, v in groups["dirs"].items()}).remove()
        remove_tree(root)
        removed += 1
    return removed


def process_start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, as text), or None where it is gone: with
    the pid, it names an owner process even after pids are reused."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None
