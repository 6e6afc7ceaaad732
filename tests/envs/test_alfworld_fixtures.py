"""The offline ALFWorld game generator: official layout, read by ALFWorld's own loader, solvable."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from roost.envs.alfworld.fixtures import FixtureSpec, make_fixtures
from roost.envs.alfworld.gamegen import GameSize, GameSpecError

THOR_ID = re.compile(r"^[A-Za-z]+\|[+-]?\d\d\.\d\d\|[+-]?\d\d\.\d\d\|[+-]?\d\d\.\d\d(\|[A-Za-z]+)?$")


def _alfred_tw_env_games(root: Path, mode: str) -> list[str]:
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    config = {
        "env": {"goal_desc_human_anns_prob": 0, "task_types": [1, 2, 3, 4, 5, 6]},
        "dataset": {
            "data_path": str(root / "train"),
            "eval_id_data_path": str(root / "valid_seen"),
            "eval_ood_data_path": str(root / "valid_unseen"),
            "num_train_games": -1,
            "num_eval_games": -1,
        },
    }
    return AlfredTWEnv(config, train_eval=mode).game_files


def test_the_unchanged_alfworld_loader_reads_every_split(alfworld_data: Path):
    root = alfworld_data / "json_2.1.1"
    counts = {
        mode: len(_alfred_tw_env_games(root, mode))
        for mode in ("train", "eval_in_distribution", "eval_out_of_distribution")
    }
    assert counts == {"train": 6, "eval_in_distribution": 3, "eval_out_of_distribution": 3}
    task_types = {p.parent.parent.name.split("-")[0] for p in root.glob("train/*/*/game.tw-pddl")}
    assert len(task_types) == 6


def test_each_trial_has_the_official_files_and_thor_style_ids(alfworld_data: Path):
    trial = next((alfworld_data / "json_2.1.1" / "valid_unseen").glob("*/trial_T*"))
    assert {p.name for p in trial.iterdir()} == {"traj_data.json", "initial_state.pddl", "game.tw-pddl"}
    traj = json.loads((trial / "traj_data.json").read_text())
    assert traj["task_type"] in trial.parent.name and set(traj["pddl_params"]) >= {"object_target", "parent_target"}
    game = json.loads((trial / "game.tw-pddl").read_text())
    assert game["solvable"] is True and game["walkthrough"] and "UNKNOWN GOAL" not in game["grammar"]
    names = re.findall(r"^\s+(\S+) - (?:object|receptacle)$", game["pddl_problem"], re.M)
    thor_ids = [
        n.replace("_minus_", "-").replace("_plus_", "+").replace("_dot_", ".").replace("_bar_", "|") for n in names
    ]
    assert thor_ids and all(THOR_ID.match(t) for t in thor_ids), thor_ids


def test_room_size_is_configurable_and_games_stay_solvable(tmp_path: Path):
    spec = FixtureSpec({"train": 6}, GameSize(receptacles=3, distractors=1), seed=7)
    games = make_fixtures(tmp_path, spec)
    assert len(games) == 6 and all(g.walkthrough for g in games)
    for g in games:
        problem = json.loads(g.path.read_text())["pddl_problem"]
        assert len(re.findall(r"^\s+[A-Za-z]\S* - receptacle$", problem, re.M)) == 3


def test_too_small_a_room_is_refused_with_the_minimum(tmp_path: Path):
    with pytest.raises(GameSpecError, match="needs at least 3 receptacles"):
        make_fixtures(
            tmp_path, FixtureSpec({"train": 1}, GameSize(receptacles=2), task_types=("pick_heat_then_place_in_recep",))
        )


def test_loading_a_game_leaves_sys_argv_alone(alfworld_data: Path):
    from roost.envs.alfworld.game import AlfworldGame

    before = list(sys.argv)
    AlfworldGame().reset(str(next(alfworld_data.glob("json_2.1.1/train/*/*/game.tw-pddl"))))
    assert sys.argv == before


def test_make_fixtures_command_refuses_to_overwrite(tmp_path: Path):
    from typer.testing import CliRunner

    from roost.cli.main import build_app

    args = [
        "envs",
        "alfworld",
        "make-fixtures",
        "--out",
        str(tmp_path),
        "--train",
        "1",
        "--valid-seen",
        "0",
        "--valid-unseen",
        "0",
        "--receptacles",
        "4",
    ]
    first = CliRunner().invoke(build_app(), args)
    assert first.exit_code == 0, first.output
    second = CliRunner().invoke(build_app(), args)
    assert second.exit_code == 1 and "--force" in second.output
