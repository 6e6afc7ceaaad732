"""`roost bench prefix-tree`: the trainer's contribution to the `roost` command."""

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


def register(app: typer.Typer, bench: typer.Typer) -> None:
    bench.command("prefix-tree")(bench_prefix_tree)
