"""OSWorld's task JSON, unchanged, as pydantic models; loading a file or a task folder.

A task (OSWorld's `evaluation_examples/examples/<domain>/<id>.json`):
`id`, `snapshot`, `instruction`, `source`, `config` (setup steps `{"type", "parameters"}`),
`related_apps`, `evaluator` (`func`: one metric name or a list, `conj`: "and"/"or", `result`
and `expected`: getter configs `{"type": ..., ...}` (lists when `func` is), `options`: metric
keyword arguments, `postconfig`: steps run before evaluating). OSWorld's files carry more fields
(`trajectory`, `proxy`, `possibility_of_env_change`, ...): they are kept as they are.

A folder loads in OSWorld's layout: `examples/<domain>/<id>.json` (or `<domain>/<id>.json`
directly), optionally filtered by an index file like OSWorld's `test_all.json`
(`{"<domain>": ["<id>", ...]}`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from roost.envs.osworld.errors import TaskFormatError

GetterConfig = dict[str, Any]
"""`{"type": <getter name without get_>, ...its parameters}`, passed to OSWorld's getter as is."""


class ConfigStep(BaseModel):
    """One setup step: `type` names OSWorld's `_<type>_setup`, `parameters` its keyword arguments."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(min_length=1)
    parameters: dict[str, Any] = {}


@dataclass(frozen=True)
class Check:
    """One metric of an evaluator with its getters' configs (None: that getter is absent)."""

    func: str
    result: GetterConfig | None
    expected: GetterConfig | None
    options: dict[str, Any]


class Evaluator(BaseModel):
    """How a task is scored: OSWorld's metric functions over getters' outputs."""

    model_config = ConfigDict(extra="allow")

    func: str | list[str]
    conj: Literal["and", "or"] = "and"
    result: GetterConfig | list[GetterConfig | None] = {}
    expected: GetterConfig | list[GetterConfig | None] | None = None
    options: dict[str, Any] | list[dict[str, Any] | None] | None = None
    postconfig: list[ConfigStep] = []

    @model_validator(mode="after")
    def _shapes(self) -> Evaluator:
        if isinstance(self.func, list):
            if not self.func:
                raise ValueError("func: an empty list; give one metric name or a list of them")
            for name in ("result", "expected", "options"):
                value = getattr(self, name)
                if value in (None, {}) and name != "result":
                    continue
                if not isinstance(value, list) or len(value) != len(self.func):
                    raise ValueError(
                        f"{name}: must be a list of {len(self.func)} entries, one per func (got {type(value).__name__})"
                    )
        else:
            for name in ("result", "expected", "options"):
                if isinstance(getattr(self, name), list):
                    raise ValueError(f"{name}: a list, but func is a single metric; give one object")
        for getter in self._getters():
            if getter and not isinstance(getter.get("type"), str):
                raise ValueError(f"a getter config has no string 'type': {getter}")
        return self

    def _getters(self) -> list[GetterConfig | None]:
        out: list[GetterConfig | None] = []
        for value in (self.result, self.expected):
            out.extend(value if isinstance(value, list) else [value])
        return out

    @property
    def is_list(self) -> bool:
        """OSWorld scores a list of metrics (with `conj`) differently from a single one."""
        return isinstance(self.func, list)

    def checks(self) -> list[Check]:
        """The metrics with their getter configs and options, one per `func` entry."""
        funcs = self.func if isinstance(self.func, list) else [self.func]
        n = len(funcs)
        results = _per_check(self.result, n)
        expected = _per_check(self.expected, n)
        options = _per_check(self.options, n)
        return [Check(f, results[i], expected[i], options[i] or {}) for i, f in enumerate(funcs)]


def _per_check(value: Any, n: int) -> list[Any]:
    if isinstance(value, list):
        return [v or None for v in value]
    return [value or None] * n


class OSWorldTask(BaseModel):
    """One OSWorld task, as its JSON file has it."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1)
    snapshot: str = ""
    instruction: str = Field(min_length=1)
    source: str | list[str] = ""
    config: list[ConfigStep] = []
    related_apps: list[str] = []
    evaluator: Evaluator

    @property
    def infeasible(self) -> bool:
        """OSWorld's infeasible tasks: the right answer is FAIL."""
        return self.evaluator.func == "infeasible"


@dataclass(frozen=True)
class TaskEntry:
    """A loaded task with where it came from."""

    task: OSWorldTask
    domain: str
    """Its folder under `examples/` (OSWorld's domains: chrome, libreoffice_calc, os, ...)."""
    path: Path


def parse_task(data: Any, where: str) -> OSWorldTask:
    """A task from its decoded JSON; a malformed one raises TaskFormatError naming `where` and the field."""
    try:
        return OSWorldTask.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<task>'}: {err['msg']}" for err in exc.errors()
        )
        raise TaskFormatError(
            f"{where}: not an OSWorld task ({problems}); see OSWorld's "
            "evaluation_examples/examples/<domain>/<id>.json for the format"
        ) from None


def load_task(path: str | Path) -> OSWorldTask:
    """One task JSON file."""
    path = Path(path)
    return parse_task(_read_json(path, "task file"), str(path))


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TaskFormatError(f"{path}: no such {what}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TaskFormatError(f"{path}: not valid JSON ({exc})") from None


def load_tasks(
    path: str | Path, *, index: str | Path | None = None, skipped: list[TaskFormatError] | None = None
) -> list[TaskEntry]:
    """Every task in a file or folder, sorted by domain then id.

    `path`: a task JSON file, or a folder in OSWorld's layout (`evaluation_examples/`, holding
    `examples/<domain>/<id>.json`; or the `examples/` folder itself). JSON files beside the domain
    folders are not tasks (OSWorld's `template.json`, index files). `index`: an index file
    (`{"<domain>": ["<id>", ...]}`, as OSWorld's `test_all.json`), relative to `path` or absolute;
    only the tasks it lists load, and a listed task that is absent is an error. `skipped`: given,
    a malformed task file is appended to it and left out instead of raising, and ids need not be
    unique (OSWorld's folder repeats some across domains); otherwise a repeated id is an error.
    """
    path = Path(path)
    if path.is_file():
        return [TaskEntry(load_task(path), path.parent.name, path)]
    if not path.is_dir():
        raise TaskFormatError(f"{path}: no such task file or folder")
    root = path / "examples" if (path / "examples").is_dir() else path
    if index is not None:
        files = _indexed(root, _read_index(path / index), path / index)
    else:
        files = [p for p in sorted(root.rglob("*.json")) if not _beside_domains(p, root)]
    entries = []
    for p in files:
        try:
            entries.append(TaskEntry(load_task(p), "" if p.parent == root else p.parent.name, p))
        except TaskFormatError as exc:
            if skipped is None:
                raise
            skipped.append(exc)
    if skipped is None:
        _check_unique(entries)
    return sorted(entries, key=lambda e: (e.domain, e.task.id))


def _beside_domains(p: Path, root: Path) -> bool:
    # OSWorld's examples/ holds template.json (a blank task) beside the domain folders.
    if p.parent != root:
        return False
    return _is_index_file(p, root) or any(child.is_dir() for child in root.iterdir())


def _is_index_file(p: Path, root: Path) -> bool:
    # Index files (test_all.json, ...) sit beside the domain folders; a task file sits inside one.
    if p.parent != root:
        return False
    try:
        data = _read_json(p, "file")
    except TaskFormatError:
        return False
    return isinstance(data, dict) and "instruction" not in data and all(isinstance(v, list) for v in data.values())


def _read_index(index: Path) -> dict[str, list[str]]:
    data = _read_json(index, "index file")
    if not isinstance(data, dict) or not all(
        isinstance(ids, list) and all(isinstance(i, str) for i in ids) for ids in data.values()
    ):
        raise TaskFormatError(
            f'{index}: an index maps each domain to a list of task ids, e.g. {{"chrome": ["bb5e4c0d-..."]}}'
        )
    return data


def _indexed(root: Path, index: dict[str, list[str]], where: Path) -> list[Path]:
    files = []
    for domain, ids in index.items():
        for task_id in ids:
            p = root / domain / f"{task_id}.json"
            if not p.is_file():
                raise TaskFormatError(f"{where}: lists {domain}/{task_id}, but {p} does not exist")
            files.append(p)
    return files


def _check_unique(entries: list[TaskEntry]) -> None:
    seen: dict[str, Path] = {}
    for e in entries:
        if e.task.id in seen:
            raise TaskFormatError(
                f"{e.path}: task id {e.task.id!r} is also the id of {seen[e.task.id]}; task ids must be unique"
            )
        seen[e.task.id] = e.path
