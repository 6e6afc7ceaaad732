"""`roost bench sandbox`: start, exec and fresh-repository times per sandbox backend."""

from __future__ import annotations

import json

import typer


def bench_sandbox(
    backends: str = typer.Option("docker,bubblewrap,local", help="Comma-separated backends to measure."),
    reps: int = typer.Option(5, help="Sandbox starts per measurement (median reported)."),
    execs: int = typer.Option(20, help="Exec round trips (median reported)."),
    repo_files: int = typer.Option(500, help="Files in the generated repository for fresh_repo_ms."),
    as_json: bool = typer.Option(True, "--json/--no-json", help="Print one JSON object per backend."),
) -> None:
    """Median sandbox start, exec round trip and fresh-repository times, per backend.

    A backend that cannot run here is reported with available=false and the reason.
    """
    from .bench import run_bench

    for row in run_bench([b.strip() for b in backends.split(",") if b.strip()], reps=reps, execs=execs,
                         repo_files=repo_files):
        typer.echo(json.dumps(row) if as_json else "  ".join(f"{k}={v}" for k, v in row.items()))


def register(app: typer.Typer, bench: typer.Typer) -> None:
    bench.command("sandbox")(bench_sandbox)
