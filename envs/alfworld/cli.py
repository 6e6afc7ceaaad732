"""`roost envs alfworld ...`: ALFWorld's games, generated offline or the official download."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import typer

alfworld_app = typer.Typer(help="ALFWorld games: offline fixtures or the official download.", no_args_is_help=True)


def _err(message: str) -> None:
    typer.echo(message, err=True)


@alfworld_app.command("make-fixtures")
def make_fixtures(
    out: Path | None = typer.Option(
        None, help="Output folder (default: $ROOST_HOME/alfworld, else ~/.cache/roost/alfworld)."
    ),
    train: int = typer.Option(6, help="Games in train."),
    valid_seen: int = typer.Option(3, help="Games in valid_seen."),
    valid_unseen: int = typer.Option(3, help="Games in valid_unseen."),
    receptacles: int = typer.Option(
        6, help="Receptacles per room, counting the task's own (at least 2 or 3, by task type)."
    ),
    distractors: int = typer.Option(4, help="Objects per room besides the task's own."),
    task_type: list[str] = typer.Option([], "--task-type", help="Task types to cycle through (default: all six)."),
    seed: int = typer.Option(0, help="Seed of the generator."),
    force: bool = typer.Option(False, "--force", help="Replace an existing json_2.1.1 in the output folder."),
    as_json: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Generate a small, valid ALFWorld game set offline (official json_2.1.1 layout, planner-checked)."""
    import shutil

    from roost.envs.alfworld.catalog import fixtures_dir
    from roost.envs.alfworld.fixtures import FixtureSpec
    from roost.envs.alfworld.fixtures import make_fixtures as generate
    from roost.envs.alfworld.gamegen import TASK_TYPES, GameSize, GameSpecError

    out = out or fixtures_dir()
    if (out / "json_2.1.1").exists():
        if not force:
            _err(f"{out / 'json_2.1.1'} exists; pass --force to replace it")
            raise typer.Exit(1)
        shutil.rmtree(out / "json_2.1.1")
    spec = FixtureSpec(
        {"train": train, "valid_seen": valid_seen, "valid_unseen": valid_unseen},
        GameSize(receptacles, distractors),
        tuple(task_type) or TASK_TYPES,
        seed,
    )
    try:
        games = generate(out, spec)
    except GameSpecError as exc:
        _err(f"error: {exc}")
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {"split": g.split, "task_type": g.task_type, "gamefile": str(g.path), "walkthrough": g.walkthrough}
                    for g in games
                ],
                indent=1,
            )
        )
        return
    for split in ("train", "valid_seen", "valid_unseen"):
        types = sorted({g.task_type for g in games if g.split == split})
        _err(f"{split}: {sum(g.split == split for g in games)} games ({', '.join(types)})")
    typer.echo(str(out))


@alfworld_app.command("download")
def download(
    data_dir: Path | None = typer.Option(
        None, help="Where to put the data (default: $ALFWORLD_DATA, else ~/.cache/alfworld)."
    ),
) -> None:
    """Fetch the official ALFWorld data with `alfworld-download` (needs internet), then check it."""
    import subprocess

    from roost.envs.alfworld.catalog import AlfworldDataMissing, GameCatalog

    data_dir = data_dir or Path(os.environ.get("ALFWORLD_DATA", "~/.cache/alfworld")).expanduser()
    script = Path(sys.executable).with_name("alfworld-download")
    command = [str(script) if script.exists() else "alfworld-download", "--data-dir", str(data_dir)]
    code = subprocess.call(command)
    # alfworld-download can exit 0 without having fetched anything: look for the games.
    try:
        catalog = GameCatalog.load(data_dir)
    except AlfworldDataMissing as exc:
        _err(f"alfworld-download exited {code} but left no playable games: {exc}")
        raise typer.Exit(1) from None
    counts = ", ".join(f"{split}: {len(games)}" for split, games in catalog.games.items())
    _err(f"ALFWorld data in {data_dir} ({counts})")


def register(envs_app: typer.Typer) -> None:
    """Adds `alfworld` under the `roost envs` group."""
    envs_app.add_typer(alfworld_app, name="alfworld")
