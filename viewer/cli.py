"""`roost view`: the trajectory viewer on a run folder or a store file."""

from __future__ import annotations

from pathlib import Path

import typer

from roost.logging_setup import LogLevel, configure_logging, json_option, level_option
from roost.serving.listen import PORT_FILE_HELP, bind_listener, report_port


def view(
    run_dir: Path = typer.Argument(None, help="Run folder of `roost train` or `roost demo` (runs/demo)."),
    store: Path = typer.Option(None, "--store", help="A trajectory store file (default: RUN_DIR/trajectories.sqlite)."),
    tokenizer: Path = typer.Option(
        None, "--tokenizer", help="Folder with tokenizer.json to show token text (default: the run's model)."
    ),
    trace_url: str = typer.Option(
        None,
        "--trace-url",
        help="Link each call's trace id to a tracing UI: a URL with "
        "{trace_id} in it (Jaeger: "
        "http://127.0.0.1:16686/trace/{trace_id}).",
    ),
    host: str = typer.Option("127.0.0.1", help="Loopback only: trajectories are private (ssh -L to view remotely)."),
    port: int = typer.Option(8950, help="Port to serve on; 0: any free one (see --port-file)."),
    port_file: Path = typer.Option(None, help=PORT_FILE_HELP),
    log_level: LogLevel = level_option(),
    log_json: bool = json_option(),
) -> None:
    """Serve the trajectory viewer: runs → steps → groups → sessions → calls, token by token."""
    import uvicorn

    from roost.rollout.keys import is_loopback
    from roost.viewer.app import ViewerConfig, build_app

    if run_dir is None and store is None:
        raise typer.BadParameter("give a run folder (roost view runs/demo) or --store FILE")
    if run_dir is not None and not run_dir.is_dir():
        raise typer.BadParameter(f"{run_dir} is not a folder; give the run folder `roost train` or `roost demo` wrote")
    if not is_loopback(host):
        raise typer.BadParameter(
            f"the viewer serves trajectories without keys and binds loopback only, not {host}; "
            f"forward the port instead (ssh -L {port}:127.0.0.1:{port} HOST)"
        )
    configure_logging(log_level, json=log_json)
    try:
        config = ViewerConfig(
            run_dir=run_dir.resolve() if run_dir else None,
            store=store.resolve() if store else None,
            tokenizer=tokenizer,
            trace_url=trace_url,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--trace-url") from None
    sock = bind_listener(host, port)
    port = report_port(sock, port_file)
    typer.echo(f"roost view: http://{host}:{port}/")
    uvicorn.Server(uvicorn.Config(build_app(config), log_config=None)).run(sockets=[sock])


def register(app: typer.Typer, bench: typer.Typer) -> None:
    app.command("view")(view)
