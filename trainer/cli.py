"""`roost train`: the trainer's contribution to the `roost` command."""

from __future__ import annotations

import typer

from roost.logging_setup import LogLevel, configure_logging, json_option, level_option


def train(
    recipe: str = typer.Argument(..., help="Recipe YAML, e.g. recipes/alfworld/cpu.yaml."),
    set_: list[str] = typer.Option(
        [], "--set", help="Override a recipe key: --set trainer.lr=1e-5 (repeatable; `steps` is schedule.steps)."
    ),
    show: bool = typer.Option(False, "--show", help="Print the validated recipe and exit."),
    plan: bool = typer.Option(
        False,
        "--plan",
        help="Print where each role goes (placement.layout, planned on the Ray cluster's nodes: "
        "placement.ray_address, else a local Ray started for this and stopped) and exit; nothing of the run starts.",
    ),
    progress: bool = typer.Option(
        True,
        "--progress/--no-progress",
        help="Live progress bars per stage, as "
        "`roost demo` shows them (--no-progress: plain lines, e.g. for a log file).",
    ),
    log_level: LogLevel = level_option(),
    log_json: bool = json_option(),
) -> None:
    """Train on a recipe: (SFT →) RL on Ray, with checkpoints, metrics and resume."""
    from .recipe import RecipeError, dump_recipe, load_recipe

    configure_logging(log_level, json=log_json)

    try:
        loaded = load_recipe(recipe, set_)
    except RecipeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if show:
        typer.echo(dump_recipe(loaded))
        return
    if plan:
        _print_plan(loaded)
        return
    from .layout import LayoutError
    from .rl.loop import train as run

    try:
        if progress:
            from rich.console import Console

            from .progress import progress_hooks

            with progress_hooks(Console()) as hooks:
                summary = run(loaded, hooks)
        else:
            summary = run(loaded)
    except LayoutError as exc:  # raised before any role starts
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"done: {summary.steps} RL steps; run folder {summary.run_dir}")
    for label, result in summary.evals.items():
        rate = result.get("success_rate")
        typer.echo(
            f"  eval {label}: success {'n/a' if rate is None else f'{rate:.2f}'} "
            f"over {result['scored']} of {result['episodes']} episodes on {result['split']}"
        )
    typer.echo(f"trajectories: {summary.store} (roost trajectories export --store {summary.store} --out FILE)")


def _print_plan(recipe) -> None:
    """`--plan`: the layout planned on the cluster's nodes, or the `LayoutError` saying why it does not fit."""
    from .layout import LayoutError, describe
    from .rl.placement import cluster_plan
    from .rl.setup import ray_session

    with ray_session(recipe):
        try:
            typer.echo(describe(recipe, cluster_plan(recipe)))
        except LayoutError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None


def register(app: typer.Typer, bench: typer.Typer) -> None:
    app.command("train")(train)
