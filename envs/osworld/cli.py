"""`roost envs osworld ...`: check and survey task folders, show OSWorld's text table of a tree, list the tools.

    roost envs osworld check ~/OSWorld/evaluation_examples     # tasks per split and domain
    roost envs osworld survey ~/OSWorld/evaluation_examples    # which tasks run here, per domain
    roost envs osworld linearize tree.xml                       # OSWorld's a11y table of a tree's XML
    roost envs osworld tools                                    # the action tools as OpenAI schemas

Episodes themselves run through `roost serve osworld` (the env server) and `roost eval osworld`.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import typer

osworld_app = typer.Typer(
    help="OSWorld: check and survey task folders, linearize accessibility trees, "
    "list the action tools. "
    "Episodes: `roost serve osworld` (roost's desktops run here; OSWorld's own VM "
    "providers need its VM image: --env-arg provider=osworld).",
    no_args_is_help=True,
)


@osworld_app.command("check")
def check(
    tasks: Path = typer.Argument(..., help="A task JSON file, or a folder in OSWorld's layout (evaluation_examples/)."),
) -> None:
    """Load tasks as the env does; print how many each split and domain holds, and the malformed files left out
    (each also an error on stderr, and exit status 1)."""
    from .errors import TaskFormatError
    from .task_set import TaskSet

    try:
        task_set = TaskSet.load(tasks)
    except TaskFormatError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    domains = Counter(entry.domain or "-" for entry in task_set.entries.values())
    splits = {s: len(ids) for s, ids in task_set.splits.items()}
    typer.echo(
        json.dumps(
            {
                "tasks": len(task_set.entries),
                "splits": splits,
                "domains": dict(sorted(domains.items())),
                "skipped": [str(exc) for exc in task_set.skipped],
            }
        )
    )
    for exc in task_set.skipped:
        typer.echo(f"error: {exc}", err=True)
    if task_set.skipped:  # the env serves the rest, but a malformed file is still an error
        raise typer.Exit(1)


@osworld_app.command("survey")
def survey_command(
    tasks: Path = typer.Argument(..., help="A task JSON file, or a folder in OSWorld's layout (evaluation_examples/)."),
    cache_dir: Path | None = typer.Option(None, help="The files download steps read (default: TASKS/cache)."),
    run: bool = typer.Option(
        True,
        help="Run a do-nothing episode (reset, DONE, evaluate) for each task that "
        "can run here; --no-run only sorts them (no desktop).",
    ),
    domain: list[str] | None = typer.Option(None, help="Survey only this domain (repeatable)."),
    split: str = typer.Option("all", help="Survey only this split's tasks (test_all: those OSWorld's index lists)."),
    timeout_s: float = typer.Option(120.0, help="Time limit of one episode."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Per domain: tasks loaded, unsupported here by reason, run without an env fault, faulted."""
    import asyncio
    import contextlib

    from .errors import TaskFormatError
    from .survey import survey

    try:  # OSWorld's getters print as they fetch: keep stdout for the report
        with contextlib.redirect_stdout(sys.stderr):
            result = asyncio.run(
                survey(
                    tasks,
                    cache_dir=cache_dir,
                    run=run,
                    timeout_s=timeout_s,
                    domains=set(domain) if domain else None,
                    split=split,
                )
            )
    except TaskFormatError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(json.dumps({name: counts.as_json() for name, counts in result.items()}, indent=2))
        return
    typer.echo("domain\tloaded\tunsupported\trunnable\tran\tfaulted\treasons")
    for name, counts in result.items():
        reasons = "; ".join(f"{n} {why}" for why, n in counts.unsupported.most_common())
        typer.echo(
            f"{name}\t{counts.loaded}\t{sum(counts.unsupported.values())}\t{counts.runnable}\t{counts.ran}\t"
            f"{len(counts.faulted)}\t{reasons}"
        )


@osworld_app.command("linearize")
def linearize(
    xml: str = typer.Argument(..., help="A file of accessibility-tree XML (GET /accessibility's AT), or - for stdin."),
    platform: str = typer.Option("ubuntu", help="ubuntu or windows (the tree's namespaces)."),
) -> None:
    """Print OSWorld's text table of an accessibility tree (what a11y_tree observations show)."""
    from xml.etree.ElementTree import ParseError

    from .observations import linearize_accessibility_tree

    if platform not in ("ubuntu", "windows"):
        typer.echo(f"error: platform {platform!r}: expected ubuntu or windows", err=True)
        raise typer.Exit(2)
    try:
        text = sys.stdin.read() if xml == "-" else Path(xml).read_text(encoding="utf-8")
        typer.echo(linearize_accessibility_tree(text, platform))  # type: ignore[arg-type]
    except (OSError, ParseError) as exc:
        typer.echo(f"error: {xml}: {exc}", err=True)
        raise typer.Exit(1) from None


@osworld_app.command("tools")
def tools() -> None:
    """Print the desktop's action tools (OpenAI function schemas) as JSON."""
    from .tool_actions import tools as tool_schemas

    typer.echo(json.dumps(tool_schemas(), indent=2))


@osworld_app.command("make-fixtures")
def make_fixtures(
    out: Path | None = typer.Argument(
        None, help="Folder to write into (default: where the env looks, $ROOST_HOME/osworld or ~/.cache/roost/osworld)."
    ),
) -> None:
    """Write roost's offline task set (OSWorld's JSON, its files in OUT/cache, train/test indexes)."""
    from .fixtures import write_fixtures
    from .task_set import default_tasks_dir

    written = write_fixtures(out or default_tasks_dir())
    sizes = {split: sum(len(ids) for ids in index.values()) for split, index in written.splits.items()}
    typer.echo(json.dumps({"root": str(written.root), "tasks": written.count, "splits": sizes}))


def register(envs_app: typer.Typer) -> None:
    """Adds `osworld` under the `roost envs` group."""
    envs_app.add_typer(osworld_app, name="osworld")


if __name__ == "__main__":
    osworld_app()
