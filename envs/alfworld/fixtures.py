"""Generate a small, valid ALFWorld game set offline.

    roost envs alfworld make-fixtures --out ~/.cache/roost/alfworld --receptacles 4

writes the official layout, `json_2.1.1/{train,valid_seen,valid_unseen}/<task>/<trial>/`
with `traj_data.json`, `initial_state.pddl` and `game.tw-pddl` in each trial, so
ALFWorld's own `AlfredTWEnv` loader reads it unchanged. Every game is solved by the
PDDL planner before it is written; its plan is stored as the game's walkthrough.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from roost.envs.alfworld.game import GamePool
from roost.envs.alfworld.gamegen import TASK_TYPES, Game, GameSize, problem_pddl, sample_game
from roost.envs.alfworld.scenes import Knowledge

SPLITS = ("train", "valid_seen", "valid_unseen")
GENERATOR_VERSION = 1


class FixtureError(RuntimeError):
    """A generated game could not be solved; the generator has a bug."""


@dataclass(frozen=True)
class FixtureSpec:
    games: dict[str, int] = field(default_factory=lambda: {"train": 6, "valid_seen": 3, "valid_unseen": 3})
    """Games per split."""
    size: GameSize = GameSize()
    task_types: tuple[str, ...] = TASK_TYPES
    """Task types, cycled through in order within each split."""
    seed: int = 0


@dataclass(frozen=True)
class FixtureGame:
    split: str
    task_type: str
    path: Path
    walkthrough: list[str]


def make_fixtures(out: Path, spec: FixtureSpec = FixtureSpec()) -> list[FixtureGame]:
    """Write the game set under `out/json_2.1.1` and return what was written."""
    from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

    unknown = set(spec.games) - set(SPLITS)
    if unknown:
        raise ValueError(f"unknown split(s) {sorted(unknown)}; expected {', '.join(SPLITS)}")
    domain = Path(ALFRED_PDDL_PATH).read_text()
    grammar = Path(ALFRED_TWL2_PATH).read_text()
    knowledge = Knowledge.from_alfred()
    rng = random.Random(spec.seed)
    pool = GamePool()
    written = []
    for split in SPLITS:
        for i in range(spec.games.get(split, 0)):
            task_type = spec.task_types[i % len(spec.task_types)]
            game = sample_game(task_type, rng, knowledge, spec.size, unseen=split == "valid_unseen")
            trial = _trial_id(rng)
            trial_dir = out / "json_2.1.1" / split / game.task_dir_name / trial
            written.append(_write_game(trial_dir, split, trial, game, knowledge, domain, grammar, rng, spec, pool))
    return written


def cached_fixtures(spec: FixtureSpec = FixtureSpec(), cache: Path | None = None) -> Path:
    """A fixture set for `spec`, generated once under `cache` (default: next to the fixture
    dir) and reused while the generator version and spec stay the same."""
    import hashlib
    import shutil
    import tempfile

    from roost.envs.alfworld.catalog import fixtures_dir

    key = hashlib.sha256(repr((GENERATOR_VERSION, spec)).encode()).hexdigest()[:12]
    target = (cache or fixtures_dir().parent / "alfworld-fixtures") / key
    if (target / "json_2.1.1").is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=target.parent))
    try:
        make_fixtures(staging, spec)
        staging.rename(target)
    except OSError:
        if not (target / "json_2.1.1").is_dir():  # not a concurrent writer that won the race
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _trial_id(rng: random.Random) -> str:
    return (
        f"trial_T2019{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}_"
        f"{rng.randint(0, 23):02d}{rng.randint(0, 59):02d}{rng.randint(0, 59):02d}_{rng.randint(0, 999999):06d}"
    )


def _write_game(
    trial_dir: Path,
    split: str,
    trial: str,
    game: Game,
    knowledge: Knowledge,
    domain: str,
    grammar: str,
    rng: random.Random,
    spec: FixtureSpec,
    pool: GamePool,
) -> FixtureGame:
    from alfworld.gen import goal_library

    trial_dir.mkdir(parents=True, exist_ok=True)
    template = rng.choice(goal_library.gdict[game.task_type]["templates"])
    task_desc = template.format(
        obj=game.object_target.lower(), recep=game.parent_target.lower(), toggle=game.toggle_target.lower(), mrecep=""
    )
    problem = problem_pddl(game, knowledge, trial)
    (trial_dir / "initial_state.pddl").write_text(problem)
    (trial_dir / "traj_data.json").write_text(json.dumps(_traj_data(trial, game, task_desc, spec), indent=1))
    game_file = trial_dir / "game.tw-pddl"
    data = {
        "pddl_domain": domain,
        "grammar": grammar.replace("UNKNOWN GOAL", task_desc),
        "pddl_problem": problem,
        "solvable": None,
        "walkthrough": None,
    }
    game_file.write_text(json.dumps(data))
    walkthrough = solve(game_file, pool)
    data.update(solvable=True, walkthrough=walkthrough)
    game_file.write_text(json.dumps(data))
    return FixtureGame(split, game.task_type, game_file, walkthrough)


def _traj_data(trial: str, game: Game, task_desc: str, spec: FixtureSpec) -> dict:
    return {
        "task_id": trial,
        "task_type": game.task_type,
        "pddl_params": {
            "object_target": game.object_target,
            "parent_target": game.parent_target,
            "toggle_target": game.toggle_target,
            "mrecep_target": "",
            "object_sliced": False,
        },
        "scene": {"floor_plan": f"FloorPlan{game.scene_num}", "scene_num": game.scene_num},
        "turk_annotations": {"anns": [{"task_desc": task_desc, "high_descs": [], "votes": []}]},
        "roost": {"generator_version": GENERATOR_VERSION, "seed": spec.seed, "size": asdict(spec.size)},
    }


def solve(game_file: Path, pool: GamePool | None = None) -> list[str]:
    """The planner's solution, checked by playing it to a win."""
    with (pool or GamePool()).game() as game:
        game.reset(str(game_file))
        plan = game.walkthrough()
        state = None
        for command in plan:
            state = game.step(command)
        if not plan or state is None or not state.won:
            raise FixtureError(f"the planner could not solve {game_file} (plan: {plan})")
        return plan
