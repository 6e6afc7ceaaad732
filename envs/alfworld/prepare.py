"""ALFWorld's data hooks: the recipe `prepare` hook and the small set `roost envs check` plays.

    env:
      name: alfworld
      prepare: roost.envs.alfworld.prepare:fixtures
      prepare_args: {train: 200, valid_unseen: 60, receptacles: 4}

Each hook returns the env keyword arguments that point at what it made.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from roost.envs.conformance import CheckConfig
from roost.envs.protocol import TextAction


def fixtures(
    train: int = 6,
    valid_seen: int = 3,
    valid_unseen: int = 3,
    receptacles: int = 6,
    distractors: int = 4,
    seed: int = 0,
    processes: int | None = None,
) -> dict[str, Any]:
    """Offline ALFWorld games (generated once, cached by their spec); big sets are generated in
    parallel shards (one per core) and joined by hard links."""
    from roost.envs.alfworld.fixtures import FixtureSpec, cached_fixtures
    from roost.envs.alfworld.gamegen import GameSize

    size = GameSize(receptacles=receptacles, distractors=distractors)
    counts = {"train": train, "valid_seen": valid_seen, "valid_unseen": valid_unseen}
    processes = max(1, min(processes or os.cpu_count() or 1, 8))
    if processes == 1 or sum(counts.values()) < 24:
        return {"data_dir": str(cached_fixtures(FixtureSpec(games=counts, size=size, seed=seed)))}
    shards = [
        FixtureSpec(games={k: _share(v, i, processes) for k, v in counts.items()}, size=size, seed=seed * 1000 + i)
        for i in range(processes)
    ]
    with ProcessPoolExecutor(processes) as pool:
        folders = list(pool.map(cached_fixtures, shards))
    return {
        "data_dir": str(_joined(folders, f"{seed}-{train}-{valid_seen}-{valid_unseen}-{receptacles}-{distractors}"))
    }


def _share(total: int, index: int, parts: int) -> int:
    return total // parts + (1 if index < total % parts else 0)


def _joined(folders: list[Path], key: str) -> Path:
    """One data folder holding the shards' trials, its files hard-linked (ALFWorld's loader walks the
    tree with os.walk, which does not follow symlinked folders)."""
    target = folders[0].parent / f"joined-{key}"
    if (target / "json_2.1.1").is_dir():
        return target
    staging = Path(tempfile.mkdtemp(prefix=".joined-", dir=target.parent))
    for folder in folders:
        for trial in (folder / "json_2.1.1").glob("*/*/*"):
            copy = staging / trial.relative_to(folder)
            if copy.exists():
                continue
            copy.mkdir(parents=True)
            for file in trial.iterdir():
                try:
                    os.link(file, copy / file.name)
                except OSError:
                    shutil.copy2(file, copy / file.name)
    try:
        staging.rename(target)
    except OSError:
        if not (target / "json_2.1.1").is_dir():
            raise
    return target


def check_config() -> CheckConfig:
    """The default fixture games (cached); the game's opening `look` as the probe, the planner's plan to finish."""
    return CheckConfig(
        env_args=fixtures(processes=1), split="train", probe=TextAction("look"), finish_by_expert_plan=True
    )
