"""`roost envs hermes ...`: check task files; write the scripted-sampler rules that solve them."""

from __future__ import annotations

import json
from pathlib import Path

import typer

hermes_app = typer.Typer(help="Hermes tasks: check task files, script their solutions.", no_args_is_help=True)


def _tasks(source: Path | None):
    from .task import TaskFormatError, builtin_tasks_path, load_tasks

    try:
        return load_tasks(source or builtin_tasks_path())
    except TaskFormatError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


@hermes_app.command("check")
def check_command(source: Path | None = typer.Argument(None, help="A task file (default: roost's own).")) -> None:
    """Validate a task file (JSON list or JSONL of Hermes tasks) and list its tasks."""
    tasks = _tasks(source)
    typer.echo(f"{len(tasks)} valid tasks")
    for task in tasks:
        typer.echo(f"  {task.split:6} {task.id:16} {task.verifier.reward:12} {task.instruction[:60]}")


@hermes_app.command("script")
def script_command(
    out: Path = typer.Option(..., help="Where to write the rules (JSON)."),
    tasks: Path | None = typer.Option(None, help="A task file (default: roost's own)."),
) -> None:
    """Write scripted-sampler rules that make hermes-agent run each task's reference solution."""
    from .scripted import solution_rules

    out.write_text(json.dumps(solution_rules(_tasks(tasks)), indent=1))
    typer.echo(f"wrote {out}; serve it with `roost engine --sampler scripted --script {out} --context-length 16384`")


def register(envs_app: typer.Typer) -> None:
    """Adds `hermes` under the `roost envs` group."""
    envs_app.add_typer(hermes_app, name="hermes")
