"""One Hermes task: an instruction, the files it starts from, and a verifier that decides the reward.

The verifier is a shell command run in the episode's sandbox after the agent stops. Its
`reward` mode says how its result becomes the reward:

    exit_code     1.0 when the command exits 0, else 0.0
    output_match  1.0 when the regex `pattern` is found in its output (and it exited 0)
    output_float  the last line of its output, a number in [0, 1] (partial credit)

`verifier_files` are written just before the verifier runs, so the agent never sees them
(hidden tests, expected answers).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class TaskFormatError(ValueError):
    """A task file holds a row that is not a Hermes task."""


class Verifier(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1)
    """Shell, run in the sandbox's working directory."""
    reward: Literal["exit_code", "output_match", "output_float"] = "exit_code"
    pattern: str | None = None
    """output_match: a Python regex searched in the command's output."""
    timeout_s: float = Field(60.0, gt=0)

    @model_validator(mode="after")
    def _pattern_when_matching(self) -> Verifier:
        if self.reward == "output_match":
            if not self.pattern:
                raise ValueError("a verifier with reward 'output_match' needs a `pattern` (a regex)")
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"`pattern` is not a valid regex: {exc}") from None
        return self


class HermesTask(BaseModel):
    """What the agent is asked to do, where, and how its work is checked."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    split: str = "train"
    instruction: str = Field(min_length=1)
    files: dict[str, str] = {}
    """Relative path → text: the working directory the agent starts in."""
    setup: str = ""
    """Shell run in the sandbox before the agent starts (its failure is an env fault)."""
    verifier: Verifier
    verifier_files: dict[str, str] = {}
    """Relative path → text, written just before the verifier runs (hidden from the agent)."""
    solution: str = ""
    """Shell that solves the task (never shown to the agent): checks that the task is solvable."""
    metadata: dict[str, str] = {}

    @field_validator("files", "verifier_files")
    @classmethod
    def _relative_paths(cls, files: dict[str, str]) -> dict[str, str]:
        for path in files:
            parts = Path(path).parts
            if not parts or Path(path).is_absolute() or ".." in parts:
                raise ValueError(f"file path {path!r} must be relative and stay inside the working directory")
        return files


def load_tasks(path: Path) -> list[HermesTask]:
    """Tasks from a JSON list (`.json`) or a JSONL file (one task a line; blank and `#` lines skipped)."""
    if path.suffix == ".json":
        rows = [(f"{path}[{i}]", row) for i, row in enumerate(_json(path.read_text(), str(path)))]
    else:
        rows = [
            (f"{path}:{n}", _json(line, f"{path}:{n}"))
            for n, line in enumerate(path.read_text().splitlines(), 1)
            if line.strip() and not line.lstrip().startswith("#")
        ]
    tasks, seen = [], set()
    for where, row in rows:
        try:
            task = HermesTask.model_validate(row)
        except ValidationError as exc:
            raise TaskFormatError(f"{where}: not a Hermes task: {exc}") from None
        if task.id in seen:
            raise TaskFormatError(f"{where}: task id {task.id!r} appears twice; ids must be unique")
        seen.add(task.id)
        tasks.append(task)
    return tasks


def _json(text: str, where: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TaskFormatError(f"{where}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None


def builtin_tasks_path() -> Path:
    """roost's own offline task set, shipped with the package."""
    return Path(__file__).with_name("tasks.json")
