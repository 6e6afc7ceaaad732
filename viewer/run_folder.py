"""A run folder as `roost train` and `roost demo` leave it, read for the viewer.

    recipe.yaml  state.json  evals.json  metrics.jsonl  trajectories.sqlite  model/  checkpoints/  logs/

Any of them may be missing or half-written (a run still starting, a crash mid-write): each
reader returns what it can and says what it could not read, never raises on the folder's
content. `file()` is the only way a page reaches a file, and it refuses anything outside
the folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STORE_NAME = "trajectories.sqlite"


class OutsideRunFolder(ValueError):
    """A requested path is not a file inside the run folder."""


@dataclass
class Metrics:
    """The rows of metrics.jsonl by stage, and how many lines could not be read."""

    by_stage: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    bad_lines: int = 0


@dataclass
class RunFolder:
    root: Path

    @property
    def store(self) -> Path:
        return self.root / STORE_NAME

    def metrics(self) -> Metrics:
        out = Metrics()
        path = self.root / "metrics.jsonl"
        if not path.is_file():
            return out
        with path.open("rb") as lines:
            for line in lines:
                row = _json_object(line)
                if row is None or not isinstance(row.get("step"), int):
                    out.bad_lines += bool(line.strip())  # a truncated last line, say
                    continue
                out.by_stage.setdefault(str(row.get("stage", "rl")), []).append(row)
        return out

    def evals(self) -> tuple[dict[str, dict[str, Any]], str | None]:
        """Eval results by label, and a note when evals.json exists but cannot be read."""
        return self._json("evals.json")

    def state(self) -> tuple[dict[str, Any], str | None]:
        return self._json("state.json")

    def _json(self, name: str) -> tuple[dict[str, Any], str | None]:
        path = self.root / name
        if not path.is_file():
            return {}, None
        data = _json_object(path.read_bytes())
        if data is None:
            return {}, f"{name} is not a JSON object (half-written?); its contents are left out"
        return data, None

    def tokenizer_dirs(self) -> list[Path]:
        """Folders that may hold the run's tokenizer, most likely first."""
        state, _ = self.state()
        found = [Path(state["model"])] if isinstance(state.get("model"), str) else []
        return found + [self.root / "model"]

    def file(self, relative: str) -> Path:
        """The file `relative` names inside the run folder; links out of it are refused too."""
        root = self.root.resolve()
        try:
            target = (root / relative).resolve()
        except (OSError, ValueError) as exc:  # a NUL byte, a link loop
            raise OutsideRunFolder(f"{relative!r} is not a path in the run folder ({exc})") from exc
        if not target.is_relative_to(root) or relative.startswith("/"):
            raise OutsideRunFolder(f"{relative!r} is outside the run folder; only files under {root} are served")
        if not target.is_file():
            raise OutsideRunFolder(f"{relative!r} is not a file of the run folder {root}")
        return target

    def listing(self, limit: int = 200) -> list[str]:
        """The run folder's top-level files and folders, for the run page."""
        names = sorted(p.name + ("/" if p.is_dir() else "") for p in self.root.iterdir())
        return names[:limit]


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None
