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


@swe_app.command("make-tasks")
def make_tasks_command(
    projects: str | None = typer.Option(None, help="Comma-separated project names (default: every pinned one)."),
    seed: int = typer.Option(0, help="Chooses the bugs; the same seed makes the same tasks."),
    per_project: int = typer.Option(25, help="Tasks to keep per project."),
    out: Path | None = typer.Option(None, help="Output folder (default: $ROOST_HOME/swe-pypi/made)."),
    workers: int = typer.Option(2, min=1, help="Test runs at a time."),
) -> None:
    """Make SWE tasks from real projects' PyPI sdists: bugs injected, kept when their own tests catch them."""
    from .task_making.make import write_tasks

    names = [n.strip() for n in projects.split(",") if n.strip()] if projects else None
    try:
        folder, reports = write_tasks(names, seed=seed, per_project=per_project, out=out, workers=workers)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    for report in reports:
        reasons = ", ".join(f"{n} {reason}" for reason, n in report.reasons().items()) or "none"
        status = (
            f"dropped: {report.error}"
            if report.error
            else f"{report.kept} kept of {report.tried} tried ({reasons} dropped)"
        )
        typer.echo(f"  {report.project} {report.version} [{report.split}]: {status}  {report.duration_s:.0f}s")
    typer.echo(
        f"{sum(r.kept for r in reports)} tasks in {folder / 'tasks.jsonl'}; summary in {folder / 'summary.json'}"
    )


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


@swe_app.command("check-tasks")
def check_tasks_command(
    source: str = typer.Argument(..., help="A JSONL file or a dataset folder of SWE tasks; `pypi`: the shipped set."),
    split: str = typer.Option("test", help="Split to read from a dataset folder."),
    backend: str = typer.Option("auto", help="Sandbox backend: auto, bubblewrap or docker."),
    concurrency: int = typer.Option(4, min=1, help="Tasks graded at a time."),
    timeout_s: float = typer.Option(1800.0, help="Limit on one test run, in seconds."),
    limit: int | None = typer.Option(None, min=1, help="Check only the first N tasks."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Grade every task's gold patch and an empty patch: the gold should solve (nearly) all, the empty none."""
    import asyncio
    import json

    from tqdm.auto import tqdm

    from roost.envs.errors import EnvFaultError
    from roost.sandboxes import SandboxConfig

    from .env import SWEEnvConfig, SWETasks, task_source
    from .loaders import TaskFormatError, load_tasks
    from .task_check import check_tasks

    try:
        tasks = load_tasks(task_source(source), split)[:limit]
    except TaskFormatError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None

    async def run():
        shared = SWETasks(SWEEnvConfig(sandbox=SandboxConfig(backend=backend)), {})
        sandboxes = await shared.sandbox_backend()
        with tqdm(total=len(tasks), desc="gold/empty", unit="task") as bar:
            return await check_tasks(
                sandboxes, tasks, concurrency=concurrency, timeout_s=timeout_s, on_done=lambda _: bar.update(1)
            )

    try:
        report = asyncio.run(run())
    except EnvFaultError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    summary = report.summary()
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        typer.echo(
            f"{summary['tasks']} tasks: gold solves {summary['gold_solved']:.1%}, "
            f"an empty patch solves {summary['empty_solved']:.1%}"
        )
        for instance_id, status in summary["gold_failures"].items():
            typer.echo(f"  gold fails  {instance_id}: {status}")
        for instance_id in summary["empty_resolved"]:
            typer.echo(f"  empty solves  {instance_id}")


def register(envs_app: typer.Typer) -> None:
    """Adds `swe` under the `roost envs` group."""
    envs_app.add_typer(swe_app, name="swe")
