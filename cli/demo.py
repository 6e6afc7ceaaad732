"""`roost demo`: SFT → GiGPO on ALFWorld on the embedded defaults, with a before/after table.

The pipeline lives in `roost.cli.demo_pipeline`; this is its command line.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer


def demo(
    out: Path = typer.Option(Path("runs/demo"), help="Run folder (replaced): checkpoints, metrics, trajectories."),
    quick: bool = typer.Option(False, "--quick", help="A cut-down run of a few minutes (checks the set-up)."),
    tour: bool = typer.Option(
        True,
        "--tour/--no-tour",
        help="First show one tool-calling conversation as the gateway records it, token by token (~20 s).",
    ),
    allowed_replies: bool = typer.Option(
        True,
        "--allowed-replies/--free-replies",
        help="Hold each reply (evals and RL) to the env's admissible commands.",
    ),
) -> None:
    """SFT a small model on ALFWorld expert demonstrations, then RL (GiGPO); print held-out success."""
    from rich.console import Console

    from roost.cli.demo_pipeline import DemoConfig, run_demo, table

    console = Console()
    if tour:
        from roost.rollout.gateway.tour import run_tour

        run_tour(console)
    config = replace(DemoConfig.quick() if quick else DemoConfig(), allowed_replies=allowed_replies)
    console.print("roost demo: SFT → GiGPO on ALFWorld (games, engine, gateway, env server and trainer all local)")
    result = run_demo(config, out.resolve(), console)
    console.print(table(result))
    minutes, seconds = divmod(int(result.seconds), 60)
    console.print(f"done in {minutes} min {seconds} s. Run folder: {result.run_dir}")
    console.print(
        f"trajectories (every token of every episode): {result.store}\n"
        f"  roost trajectories export --store {result.store} --format jsonl --out demo.jsonl\n"
        f"  (held-out episodes are in groups eval-before-*, eval-after_sft-*, eval-final-*; "
        f"training groups are named <launch>-g<N>/<task>)\n"
        f"metrics per step: {result.run_dir / 'metrics.jsonl'}"
    )
    console.print(f"see every episode, token by token, and the curves: roost view {result.run_dir}")


def register(app: typer.Typer, bench: typer.Typer) -> None:
    app.command("demo")(demo)
