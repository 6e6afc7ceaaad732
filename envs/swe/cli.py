"""`roost envs swe ...`: build the offline task set; list and check tasks."""

from __future__ import annotations

from pathlib import Path

import typer

swe_app = typer.Typer(help="SWE tasks: roost's offline fixtures, and checks of task files.", no_args_is_help=True)


@swe_app.command("make-fixtures")
def make_fixtures_command(
    out: Path | None = typer.Option(None, help="Output folder (default: $ROOST_HOME/swe-fixtures)."),
) -> None:
    """Build the fixture repositories (git, at their base commits) and tasks.jsonl."""
    from .fixtures import default_dir, make_fixtures

    folder = out or default_dir()
    tasks = make_fixtures(folder)
    typer.echo(f"{len(tasks)} tasks in {folder / 'tasks.jsonl'}")
    for task in tasks:
        typer.echo(f"  {task.instance_id}  {task.base_commit[:12]}  {task.repo_dir}")


@swe_app.command("check")
def check_command(
    source: Path = typer.Argument(..., help="A JSONL file or a dataset folder of SWE tasks."),
    split: str = typer.Option("test", help="Split to read from a dataset folder."),
) -> None:
    """Validate a task file: every row must be a usable SWE task."""
    from .loaders import TaskFormatError, load_tasks

    try:
        tasks = load_tasks(source, split)
    except TaskFormatError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"{len(tasks)} valid tasks in {source}")


def register(envs_app: typer.Typer) -> None:
    """Adds `swe` under the `roost envs` group."""
    envs_app.add_typer(swe_app, name="swe")
