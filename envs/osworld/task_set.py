"""The tasks one OSWorld env serves, by split.

A task folder in OSWorld's layout (`evaluation_examples/`: `examples/<domain>/<id>.json`
beside index files such as `test_all.json`) gives one split per index file, named by its
stem (`test_all`, `test_small`; roost's fixture set: `train`, `test`), and the split `all`
holding every task. A single task file, or a folder without index files, is one split,
`test` (and `all`). In a folder, a malformed task file is left out and kept in `skipped` (its
error names the file and the field): OSWorld's own folder holds unfinished tasks that no index
lists; a single malformed file raises. A task is known by its id, or by `<domain>/<file name
without .json>` where its id is not unique in the folder (OSWorld repeats a few across domains).
"""

from __future__ import annotations

import os
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from roost.envs.errors import BadRequestError, UnknownTaskError
from roost.envs.protocol import Task

from .errors import TaskFormatError
from .tasks import TaskEntry, _is_index_file, load_tasks

ALL = "all"


def default_tasks_dir() -> Path:
    """Where `roost envs osworld make-fixtures` writes by default: `$ROOST_HOME/osworld`, else ~/.cache/roost/osworld."""
    return Path(os.environ.get("ROOST_HOME", Path.home() / ".cache" / "roost")).expanduser() / "osworld"


@dataclass(frozen=True)
class TaskSet:
    source: Path
    entries: dict[str, TaskEntry]
    splits: dict[str, tuple[str, ...]]
    """Split name → task ids, in the order the index lists them."""
    skipped: tuple[TaskFormatError, ...] = ()
    """The folder's malformed task files, left out."""

    @classmethod
    def load(cls, source: Path) -> TaskSet:
        indexes = sorted(p for p in source.glob("*.json") if _is_index_file(p, source)) if source.is_dir() else []
        skipped: list[TaskFormatError] = []
        everything = load_tasks(source, skipped=skipped if source.is_dir() else None)
        keys = _keys(everything)
        entries = {keys[e.path]: e for e in everything}
        splits = {ALL: tuple(entries)}
        for index in indexes:
            listed = load_tasks(source, index=index.name, skipped=[])
            splits[index.stem] = tuple(keys[e.path] for e in listed if e.path in keys)
        if not indexes:
            splits["test"] = tuple(entries)
        return cls(source, entries, splits, tuple(skipped))

    def tasks(self, split: str) -> list[Task]:
        return [self._task(task_id, split) for task_id in self.splits.get(split, ())]

    def choose(self, task_id: str | None, seed: int | None, split: str | None) -> TaskEntry:
        if split is not None and split not in self.splits:
            raise UnknownTaskError(f"no split {split!r} in {self.source}; splits: {', '.join(self.splits)}")
        ids = self.splits[split or (ALL if task_id is not None else self._default_split())]
        if task_id is not None:
            if task_id not in ids:
                raise UnknownTaskError(
                    f"no task {task_id!r} in split {split or ALL!r} of {self.source}; "
                    f"list them with GET /tasks?split={split or ALL}"
                )
            return self.entries[task_id]
        if not ids:
            raise BadRequestError(f"split {split!r} of {self.source} holds no tasks")
        return self.entries[random.Random(seed).choice(sorted(ids))]

    def _default_split(self) -> str:
        return "test" if "test" in self.splits else ALL

    def _task(self, task_id: str, split: str) -> Task:
        entry = self.entries[task_id]
        task = entry.task
        return Task(
            task_id,
            split,
            {
                "id": task.id,
                "domain": entry.domain,
                "instruction": task.instruction,
                "related_apps": task.related_apps,
                "infeasible": task.infeasible,
            },
        )


def _keys(entries: list[TaskEntry]) -> dict[Path, str]:
    counts = Counter(e.task.id for e in entries)
    return {e.path: e.task.id if counts[e.task.id] == 1 else f"{e.domain}/{e.path.stem}" for e in entries}
