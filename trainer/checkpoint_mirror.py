"""A copy of a run's checkpoints at a storage URI (`schedule.checkpoint_uri`), through fsspec, so a
run resumes on a node that never saw its output folder.

    mirror = CheckpointMirror("s3://bucket/runs/alfworld")      # file://, memory://, s3:// (s3fs), ...
    mirror.push(run_dir, state)        # after each local save: the checkpoint, then state.json
    mirror.pull(run_dir)               # before a resume: the URI's newer state and what it names

At the URI the run keeps the layout of its output folder (checkpoint.py): `checkpoints/<label>/`,
`model/` when the run built its own starting model, `evals.json`, and `state.json` written last,
with its paths relative to the run folder, so it never names a checkpoint not wholly copied and
reads back into any folder. fsspec is imported only when a URI is set.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .checkpoint import RunState

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

_PATH_FIELDS = ("checkpoint", "reference", "model")
"""RunState's fields that name folders, inside the run folder or not."""


class CheckpointUriError(ValueError):
    """The checkpoint URI cannot be used (no fsspec, an unknown protocol, a missing package)."""


def filesystem(uri: str) -> tuple[AbstractFileSystem, str]:
    """The fsspec filesystem of `uri` and the path in it; `CheckpointUriError` saying what to install."""
    try:
        import fsspec
    except ImportError:
        raise CheckpointUriError(
            f"schedule.checkpoint_uri {uri!r} needs fsspec; install it (pip install fsspec, and s3fs "
            "for s3://) or leave checkpoint_uri out to keep checkpoints in output_dir only"
        ) from None
    try:
        return fsspec.core.url_to_fs(uri)
    except (ImportError, ValueError) as exc:
        raise CheckpointUriError(
            f"schedule.checkpoint_uri {uri!r} cannot be opened: {exc}; use a file://, memory:// or "
            "s3:// URI (s3:// needs s3fs installed) or any protocol fsspec knows"
        ) from None


class CheckpointMirror:
    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.fs, self.root = filesystem(uri)

    def _at(self, relative: str) -> str:
        return f"{self.root.rstrip('/')}/{relative}"

    def push(self, run_dir: Path, state: RunState) -> None:
        """Copy the folders `state` names inside `run_dir` (the newest checkpoint, a built model,
        the KL reference), then evals.json, then state.json; drop the URI's checkpoints that
        `run_dir` no longer keeps."""
        for field in _PATH_FIELDS:
            relative = _inside(run_dir, getattr(state, field))
            # a checkpoint is written once; a built model never changes after the run made it
            if relative and (field == "checkpoint" or not self.fs.exists(self._at(relative))):
                self._put(run_dir / relative, relative)
        if (run_dir / "evals.json").is_file():
            self._write("evals.json", (run_dir / "evals.json").read_bytes())
        self._write("state.json", json.dumps(_relative(run_dir, state), indent=1).encode())
        self._prune(run_dir)

    def _write(self, relative: str, data: bytes) -> None:
        self.fs.makedirs(self.root, exist_ok=True)
        self.fs.pipe(self._at(relative), data)

    def _put(self, folder: Path, relative: str) -> None:
        target = self._at(relative)
        if self.fs.exists(target):
            self.fs.rm(target, recursive=True)
        for file in sorted(p for p in folder.rglob("*") if p.is_file()):
            remote = f"{target}/{file.relative_to(folder).as_posix()}"
            self.fs.makedirs(remote.rsplit("/", 1)[0], exist_ok=True)
            self.fs.put_file(str(file), remote)  # streamed: weights do not pass through memory

    def _prune(self, run_dir: Path) -> None:
        local = {p.name for p in (run_dir / "checkpoints").iterdir()} if (run_dir / "checkpoints").is_dir() else set()
        remote = self._at("checkpoints")
        for path in self.fs.ls(remote, detail=False) if self.fs.exists(remote) else []:
            if path.rstrip("/").rsplit("/", 1)[-1] not in local:
                self.fs.rm(path, recursive=True)

    def remote_state(self) -> dict[str, Any] | None:
        path = self._at("state.json")
        return json.loads(self.fs.cat_file(path)) if self.fs.exists(path) else None

    def pull(self, run_dir: Path) -> RunState | None:
        """Bring the URI's state into `run_dir` when it is further on than the local one (or
        there is none), with the folders it names; the state now in `run_dir`, or None."""
        remote, local = self.remote_state(), RunState.load(run_dir)
        if remote is None or (local is not None and _progress(asdict(local)) >= _progress(remote)):
            return local
        for field in _PATH_FIELDS:
            relative = remote.get(field)
            if relative and not Path(relative).is_absolute():
                self._get(relative, run_dir / relative)
        if self.fs.exists(self._at("evals.json")):
            (run_dir / "evals.json").write_bytes(self.fs.cat_file(self._at("evals.json")))
        state = _absolute(run_dir, remote)
        state.save(run_dir)
        return state

    def _get(self, relative: str, folder: Path) -> None:
        source = self._at(relative).rstrip("/")
        for path in self.fs.find(source):
            target = folder / path[len(source) :].lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(path, str(target))


def _progress(state: dict[str, Any]) -> tuple[int, int, int]:
    return (state.get("step", 0), state.get("sft_step", 0), state.get("weight_version", 0))


def _inside(run_dir: Path, path: str | None) -> str | None:
    """`path` relative to `run_dir`, or None when it is not inside it (a model the recipe names)."""
    if not path:
        return None
    try:
        return Path(path).resolve().relative_to(run_dir.resolve()).as_posix()
    except ValueError:
        return None


def _relative(run_dir: Path, state: RunState) -> dict[str, Any]:
    data = asdict(state)
    for field in _PATH_FIELDS:
        data[field] = _inside(run_dir, data[field]) or data[field]
    return data


def _absolute(run_dir: Path, data: dict[str, Any]) -> RunState:
    known = {k: v for k, v in data.items() if k in RunState.__dataclass_fields__}
    state = RunState(**known)
    paths = {f: str(run_dir / v) for f in _PATH_FIELDS if (v := known.get(f)) and not Path(v).is_absolute()}
    return replace(state, **paths)
