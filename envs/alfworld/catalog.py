"""Where the ALFWorld games are, and which games each split holds.

Splits are listed by ALFWorld's own `AlfredTWEnv.collect_game_files`, unchanged, so a
directory that roost accepts is one ALFWorld accepts too. A task id is the game's
trial folder relative to `json_2.1.1`, e.g.
`train/pick_and_place_simple-Apple-None-Fridge-12/trial_T20190908_010101_000001`.
"""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass
from pathlib import Path

from roost.envs.errors import BadRequestError, UnknownTaskError
from roost.envs.protocol import Task

# roost split name → (AlfredTWEnv's train_eval mode, json_2.1.1 subfolder)
SPLITS = {
    "train": ("train", "train"),
    "valid_seen": ("eval_in_distribution", "valid_seen"),
    "valid_unseen": ("eval_out_of_distribution", "valid_unseen"),
}


class AlfworldDataMissing(FileNotFoundError):
    """No playable games where the env looked."""


def default_data_dir() -> Path:
    """`$ROOST_ALFWORLD_DATA`, else a downloaded ALFWorld dataset, else roost's fixture cache."""
    if os.environ.get("ROOST_ALFWORLD_DATA"):
        return Path(os.environ["ROOST_ALFWORLD_DATA"]).expanduser()
    alfworld_data = Path(os.environ.get("ALFWORLD_DATA", "~/.cache/alfworld")).expanduser()
    if (alfworld_data / "json_2.1.1").is_dir():
        return alfworld_data
    return fixtures_dir()


def fixtures_dir() -> Path:
    """Where `roost envs alfworld make-fixtures` writes by default."""
    home = os.environ.get("ROOST_HOME")
    base = Path(home).expanduser() if home else Path("~/.cache/roost").expanduser()
    return base / "alfworld"


@dataclass(frozen=True)
class GameEntry:
    task: Task
    gamefile: str


@dataclass(frozen=True)
class GameCatalog:
    data_dir: Path
    games: dict[str, dict[str, GameEntry]]
    """split → task id → game."""

    @classmethod
    def load(cls, data_dir: Path) -> GameCatalog:
        root = data_dir / "json_2.1.1"
        games = {split: _collect(root, split) for split in SPLITS}
        if not any(games.values()):
            raise AlfworldDataMissing(
                f"no solvable ALFWorld games under {root}. Generate a small offline set with "
                f"`roost envs alfworld make-fixtures --out {data_dir}`, or fetch the full dataset "
                f"with `roost envs alfworld download --data-dir {data_dir}` (needs internet)."
            )
        return cls(data_dir, games)

    def tasks(self, split: str) -> list[Task]:
        return [entry.task for entry in self._split(split).values()]

    def entries(self, split: str) -> list[GameEntry]:
        return list(self._split(split).values())

    def get(self, split: str | None, task_id: str) -> GameEntry:
        """The game of `task_id`, looked up in `split`, or in every split when none is given."""
        splits = [split] if split else list(SPLITS)
        for name in splits:
            entry = self._split(name).get(task_id)
            if entry is not None:
                return entry
        where = f"split {split!r}" if split else "any split"
        raise UnknownTaskError(
            f"no task {task_id!r} in {where} of {self.data_dir}; list them with GET /tasks?split={split or 'train'}"
        )

    def _split(self, split: str) -> dict[str, GameEntry]:
        if split not in SPLITS:
            raise BadRequestError(f"unknown split {split!r}; ALFWorld has {', '.join(SPLITS)}")
        return self.games[split]


def _collect(root: Path, split: str) -> dict[str, GameEntry]:
    from alfworld.agents.environment.alfred_tw_env import TASK_TYPES, AlfredTWEnv

    mode, folder = SPLITS[split]
    paths = {
        name: str(root / sub)
        for name, sub in (
            ("data_path", "train"),
            ("eval_id_data_path", "valid_seen"),
            ("eval_ood_data_path", "valid_unseen"),
        )
    }
    config = {
        "env": {"goal_desc_human_anns_prob": 0, "task_types": list(TASK_TYPES)},
        "dataset": {**paths, "num_train_games": -1, "num_eval_games": -1},
    }
    if not (root / folder).is_dir():
        return {}
    # The loader prints progress bars and counts; keep them out of server logs.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        gamefiles = AlfredTWEnv(config, train_eval=mode).game_files
    tasks = {}
    for gamefile in sorted(gamefiles):
        trial = Path(gamefile).parent
        task_id = trial.relative_to(root).as_posix()
        task_type = trial.parent.name.split("-", 1)[0]
        tasks[task_id] = GameEntry(Task(task_id, split, {"task_type": task_type}), gamefile)
    return tasks
