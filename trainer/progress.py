"""Live progress of a training run: one rich progress bar per stage (env, SFT, evals, RL steps)
with the newest step's headline number, as `roost train` and `roost demo` show it.

    with progress_hooks(Console()) as hooks:
        summary = train(recipe, hooks)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .rl.loop import Hooks


@contextmanager
def progress_hooks(console: Any) -> Iterator[Hooks]:
    """`Hooks` that draw the run's stages on `console` (a rich Console); what the run echoes
    (per-step metric lines, warnings) prints above the bars."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (
        SpinnerColumn(),
        TextColumn("{task.description:<34}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        bars: dict[str, Any] = {}

        def stage(name: str, total: int) -> None:
            for task in bars.values():  # a new stage completes the ones before it
                progress.update(task, completed=progress.tasks[task].total or 1, total=progress.tasks[task].total or 1)
            bars[name] = progress.add_task(name, total=total or None, info="")

        def advance(name: str, step: int, values: dict[str, Any]) -> None:
            progress.update(bars[name], completed=step, info=_info(name, values))

        def echo(text: str) -> None:  # as written: "[rl 3] reward ..." is no rich markup
            progress.console.print(text, markup=False, highlight=False)

        yield Hooks(stage=stage, advance=advance, echo=echo)


def _info(stage: str, values: dict[str, Any]) -> str:
    if stage == "sft":
        return f"loss {values['loss']:.3f}"
    if stage == "rl":
        success = values.get("success")
        return f"success {success:.2f}" if success is not None else ""
    rate = values.get("success_rate")
    return f"success {rate:.2f}" if rate is not None else ""
