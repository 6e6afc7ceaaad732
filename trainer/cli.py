"""`roost train` and `roost bench prefix-tree`: the trainer's contribution to the `roost` command."""

from __future__ import annotations

import json

import typer


def bench_prefix_tree(
    case: list[str] = typer.Option(["grpo", "agentic"], help="Cases to run: grpo, agentic (repeat the option)."),
    vocab_size: int = typer.Option(4096, help="Vocabulary of the benchmark model (151936 = Qwen3's)."),
    repeats: int = typer.Option(2, help="Timed steps per layout (alternating); the fastest is reported."),
    threads: int = typer.Option(2, help="torch threads per layout run."),
    as_json: bool = typer.Option(True, "--json/--no-json", help="Print one JSON object per case."),
) -> None:
    """A training step on flat vs prefix-tree packed batches: time, peak memory, logprob equality."""
    from .bench import run_bench

    for row in run_bench(case, vocab=vocab_size, repeats=repeats, threads=threads):
        typer.echo(json.dumps(row) if as_json else "  ".join(f"{k}={v}" for k, v in row.items()))


def train(
    recipe: str = typer.Argument(..., help="Recipe YAML, e.g. recipes/alfworld/cpu.yaml."),
    set_: list[str] = typer.Option([], "--set", help="Override a recipe key: --set trainer.lr=1e-5 (repeatable; "
                                   "`steps` is schedule.steps)."),
    show: bool = typer.Option(False, "--show", help="Print the validated recipe and exit."),
) -> None:
    """Train on a recipe: (SFT →) RL on Ray, with checkpoints, metrics and resume."""
    from .recipe import RecipeError, dump_recipe, load_recipe

    try:
        loaded = load_recipe(recipe, set_)
    except RecipeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if show:
        typer.echo(dump_recipe(loaded))
        return
    from .rl.loop import train as run

    summary = run(loaded)
    typer.echo(f"done: {summary.steps} RL steps; run folder {summary.run_dir}")
    for label, result in summary.evals.items():
        rate = result.get("success_rate")
        typer.echo(f"  eval {label}: success {'n/a' if rate is None else f'{rate:.2f}'} "
                   f"over {result['scored']} of {result['episodes']} episodes on {result['split']}")
    typer.echo(f"trajectories: {summary.store} (roost trajectories export --store {summary.store} --out FILE)")


def register(app: typer.Typer, bench: typer.Typer) -> None:
    app.command("train")(train)
    bench.command("prefix-tree")(bench_prefix_tree)
