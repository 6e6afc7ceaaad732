"""roost's offline OSWorld task set: `roost envs osworld make-fixtures OUT`.

Writes tasks in OSWorld's own layout, so the env (and OSWorld's tools) load them as they
load `evaluation_examples/`:

    OUT/examples/<domain>/<id>.json   OSWorld task JSON, plus the scripted solution (`expert`)
    OUT/train.json, OUT/test.json     split indexes, {"<domain>": ["<id>", ...]} as test_all.json
    OUT/cache/<name>                  the input and gold files the `download` steps and
                                      `cloud_file` getters read (no network is used)

Domains: `os` (terminal and files, LXTerminal), `mousepad` (text editor), `libreoffice_calc`,
`libreoffice_writer`, `chrome` (Chromium tabs), and a few infeasible `os` tasks. Every task
is scored by OSWorld's own metric functions. Every third task of a domain is in `test`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from roost.envs.osworld.fixture_kit import FixtureTask
from roost.envs.osworld.fixtures_chrome import chrome_tasks, infeasible_tasks
from roost.envs.osworld.fixtures_editor import editor_tasks
from roost.envs.osworld.fixtures_office import calc_tasks, writer_tasks
from roost.envs.osworld.fixtures_terminal import terminal_tasks

TEST_EVERY = 3


@dataclass(frozen=True)
class FixtureSet:
    root: Path
    splits: dict[str, dict[str, list[str]]]
    """Split → domain → task ids."""

    @property
    def count(self) -> int:
        return sum(len(ids) for split in self.splits.values() for ids in split.values())


def fixture_tasks() -> list[FixtureTask]:
    return terminal_tasks() + editor_tasks() + calc_tasks() + writer_tasks() + chrome_tasks() + infeasible_tasks()


def split_of(position: int) -> str:
    """The split of a domain's `position`-th task."""
    return "test" if position % TEST_EVERY == TEST_EVERY - 1 else "train"


def write_fixtures(out: Path) -> FixtureSet:
    """Write every fixture task, its files and the split indexes under `out`."""
    out = Path(out).expanduser()
    cache = out / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    splits: dict[str, dict[str, list[str]]] = {"train": {}, "test": {}}
    seen: dict[str, int] = {}
    for task in fixture_tasks():
        position = seen[task.domain] = seen.get(task.domain, -1) + 1
        folder = out / "examples" / task.domain
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{task.id}.json").write_text(json.dumps(task.to_json(), indent=2) + "\n", encoding="utf-8")
        for name, data in task.files.items():
            (cache / name).write_bytes(data)
        splits[split_of(position)].setdefault(task.domain, []).append(task.id)
    for split, index in splits.items():
        (out / f"{split}.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    return FixtureSet(out, splits)


def ensure_fixtures(out: Path) -> Path:
    """`out`, holding the fixture set: written there first when the folder does not exist. Written
    beside it and renamed into place, so processes starting at once never read a half-written set."""
    out = Path(out).expanduser()
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    write_fixtures(staging)
    try:
        os.rename(staging, out)
    except OSError:  # another process put its set there first
        shutil.rmtree(staging, ignore_errors=True)
    return out
