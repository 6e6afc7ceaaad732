"""What a run keeps on disk to resume after a crash.

    run_dir/
      state.json              RunState: the step reached, the weight version, which groups were trained
      evals.json              evaluation results by label (before, after_sft, step-N, final)
      checkpoints/step-N/     hf/ (Hugging Face weights: the engine loads these; merged with trainer.lora),
                              adapter/ (trainer.lora only: the adapter alone, PEFT's layout) and trainer/
                              (per-rank optimizer state; with algorithm.critic the value head and its
                              optimizer too), written complete before state.json names them
      trajectories.sqlite     the gateway's store: finished episodes survive any crash
      metrics.jsonl

With `schedule.checkpoint_uri`, each saved checkpoint is copied to that storage URI as well, and a
resume reads it back from there when the run folder lacks it (`checkpoint_mirror.py`).

Resuming loads the newest checkpoint named by state.json (with trainer.lora: the starting model
and the checkpoint's adapter on it), restarts the engine on its
weights, and trains first on groups that finished in the store but were never trained on
(those within the staleness bound), so no finished trajectory is lost.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class RunState:
    step: int = 0
    """RL steps done."""
    weight_version: int = 0
    """The version the engine serves (bumped by every weight update)."""
    sft_step: int = 0
    sft_done: bool = False
    model: str | None = None
    """The starting model folder (built or given), for engine restarts and the KL reference."""
    checkpoint: str | None = None
    """The newest checkpoint folder (holds hf/ and trainer/)."""
    reference: str | None = None
    """The weights RL started from: the KL reference."""
    consumed_groups: list[str] = field(default_factory=list)
    """Groups already trained on, or given up on."""
    generated: int = 0
    """Rollout groups started so far (the next task in the seeded order)."""

    @classmethod
    def load(cls, run_dir: Path) -> RunState | None:
        path = run_dir / "state.json"
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def save(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        tmp = run_dir / "state.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=1))
        os.replace(tmp, run_dir / "state.json")

    @property
    def hf_weights(self) -> str | None:
        return str(Path(self.checkpoint) / "hf") if self.checkpoint else self.model


def load_evals(run_dir: Path) -> dict[str, dict[str, Any]]:
    path = run_dir / "evals.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def save_evals(run_dir: Path, evals: dict[str, dict[str, Any]]) -> None:
    tmp = run_dir / "evals.json.tmp"
    tmp.write_text(json.dumps(evals, indent=1))
    os.replace(tmp, run_dir / "evals.json")


def checkpoint_dir(run_dir: Path, label: str) -> Path:
    return run_dir / "checkpoints" / label


def adapter_dir(checkpoint: str | Path) -> Path:
    """A checkpoint's LoRA adapter folder (PEFT's layout; written with trainer.lora only)."""
    return Path(checkpoint) / "adapter"


def prune_checkpoints(run_dir: Path, keep: int, *protected: str | None) -> None:
    """Remove the oldest checkpoints beyond `keep`, never a protected one (the current checkpoint,
    the folder holding the KL reference)."""
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return
    folders = sorted(
        (p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")), key=lambda p: p.stat().st_mtime
    )
    kept = {Path(p).resolve() for p in protected if p}
    for folder in folders[: max(0, len(folders) - keep)]:
        if not any(folder.resolve() == k or folder.resolve() in k.parents for k in kept):
            shutil.rmtree(folder, ignore_errors=True)
