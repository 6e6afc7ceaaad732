"""`roost serve` and `roost envs ...`: thin layers over roost.envs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from roost.logging_setup import LogLevel, configure_logging, json_option, level_option
from roost.serving.listen import PORT_FILE_HELP

envs_app = typer.Typer(
    help="Environments: list them, check them against the protocol, prepare their data.", no_args_is_help=True
)


def _env_subcommands() -> None:
    """Each env folder's own commands (`EnvSpec.cli`), under `roost envs NAME`."""
    import importlib

    from roost.envs.registry import ENVS

    for spec in ENVS.values():
        if spec.cli is not None:
            module, _, attr = spec.cli.partition(":")
            getattr(importlib.import_module(module), attr)(envs_app)


def register(app: typer.Typer, bench: typer.Typer) -> None:
    app.command("serve")(serve)
    _env_subcommands()
    app.add_typer(envs_app, name="envs")


def _err(message: str) -> None:
    typer.echo(message, err=True)


def serve(
    env: str = typer.Argument(..., help="Env name (see `roost envs list`) or module:function entry point."),
    host: str = typer.Option("127.0.0.1", help="Interface to listen on."),
    port: int = typer.Option(
        8000, help="Port to listen on (with --docker: the host port); 0: any free one (see --port-file)."
    ),
    port_file: Path | None = typer.Option(None, help=PORT_FILE_HELP),
    workers: int = typer.Option(os.cpu_count() or 1, help="Worker processes hosting episodes."),
    max_episodes: int = typer.Option(64, help="Live episodes before 429."),
    lease_s: float = typer.Option(600.0, help="Idle seconds before an episode is reaped."),
    env_arg: list[str] = typer.Option([], "--env-arg", help="KEY=VALUE passed to the env (repeatable)."),
    data_dir: Path | None = typer.Option(
        None, help="The env's data (ALFWorld: the folder holding json_2.1.1; OSWorld: the task folder)."
    ),
    docker: bool = typer.Option(False, "--docker", help="Build the env's image once and serve from a container."),
    base_image: str | None = typer.Option(None, help="BASE_IMAGE of the Docker build (default: $ROOST_BASE_IMAGE)."),
    trace: bool = typer.Option(
        False,
        "--trace",
        help="OpenTelemetry spans over OTLP/HTTP (also on with the OTEL_* variables; docs/tracing.md).",
    ),
    log_level: LogLevel = level_option(),
    log_json: bool = json_option(),
) -> None:
    """Serve an env over HTTP (POST /episodes, /episodes/{id}/step, GET /tasks, /info, /health, /metrics)."""
    import asyncio

    from roost.envs.episodes import ManagerConfig
    from roost.envs.serve import ServerConfig, parse_env_args
    from roost.envs.serve import serve as run_server

    configure_logging(log_level, json=log_json)
    server_args = [
        "--workers",
        str(workers),
        "--max-episodes",
        str(max_episodes),
        "--lease-s",
        str(lease_s),
        "--log-level",
        log_level.value,
        *(["--log-json"] if log_json else []),
    ]
    if docker:
        _serve_docker(
            env, port, data_dir, base_image, server_args + [a for p in env_arg for a in ("--env-arg", p)], port_file
        )
        return
    kwargs = parse_env_args(env_arg)
    if data_dir is not None:
        kwargs["data_dir"] = str(data_dir)
    manager = ManagerConfig(workers=workers, max_episodes=max_episodes, lease_s=lease_s)
    config = ServerConfig(env, kwargs, host, port, manager, trace=trace, port_file=port_file)
    from roost.envs.errors import EnvError

    _err(f"starting {env} on http://{host}:{port} ({workers} workers, max {max_episodes} episodes)")
    try:
        asyncio.run(run_server(config))
    except EnvError as exc:
        _err(f"error: {exc}")
        raise typer.Exit(1) from None


def _serve_docker(
    env: str, port: int, data_dir: Path | None, base_image: str | None, server_args: list[str], port_file: Path | None
) -> None:
    import signal
    import threading
    from urllib.parse import urlsplit

    from roost.envs.containers import ContainerConfig, EnvContainer, docker_client, ensure_image
    from roost.envs.registry import resolve
    from roost.serving.listen import report_port

    spec = resolve(env)
    if data_dir is None:
        default = spec.load_default_data()
        data_dir = default if default is not None and default.is_dir() else None
    client = docker_client()
    image = ensure_image(client, spec, base_image, log=_err)
    container = EnvContainer(client, image, ContainerConfig(spec, base_image, port, data_dir, server_args))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        url = container.start()  # port 0: Docker publishes it on a free host port
        report_port(urlsplit(url).port or port, port_file)
        # A process started in the background inherits SIGINT ignored; it must still stop on it.
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        _err(f"serving {env} from container {container.container.short_id} ({image}) on {url}; Ctrl-C stops it")
        while not stop.wait(1):
            pass
    except KeyboardInterrupt:  # Ctrl-C while the image builds or the container starts
        pass
    finally:
        container.stop()


@envs_app.command("check")
def check(
    env: str = typer.Argument(..., help="Env name (see `roost envs list`) or module:function entry point."),
    env_arg: list[str] = typer.Option(
        [], "--env-arg", help="KEY=VALUE passed to the env, over its own check config (repeatable)."
    ),
    split: str | None = typer.Option(None, help="Split to take the task from (default: the env's choice)."),
    task: str | None = typer.Option(None, help="Task every episode of the check plays."),
    probe_text: str | None = typer.Option(
        None,
        "--probe-text",
        help="A text action the env accepts right after reset (enables the rules that compare steps).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Check an env against the env protocol in this process (what Gymnasium's check_env is to gymnasium)."""
    import asyncio
    from dataclasses import asdict, replace

    from roost.envs.conformance import check_named
    from roost.envs.protocol import TextAction
    from roost.envs.registry import resolve
    from roost.envs.serve import parse_env_args

    try:
        config = resolve(env).load_check()
    except KeyError as exc:
        _err(f"error: {exc.args[0]}")
        raise typer.Exit(2) from None
    config = replace(
        config,
        env_args={**config.env_args, **parse_env_args(env_arg)},
        split=split or config.split,
        task_id=task or config.task_id,
        probe=TextAction(probe_text) if probe_text is not None else config.probe,
    )
    try:
        report = asyncio.run(check_named(env, config))
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        _err(f"error: could not make the env {env!r} with {config.env_args}: {type(exc).__name__}: {exc}")
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(
            json.dumps(
                {"env": report.env, "results": [{**asdict(r), "verdict": r.verdict.value} for r in report.results]},
                indent=1,
            )
        )
    else:
        for result in report.results:
            typer.echo(f"{result.verdict.value:8}{result.rule:40}{result.seconds:7.2f}s  {result.detail}")
    if report.failures:
        _err(f"{report.env} breaks {len(report.failures)} rule(s): {', '.join(r.rule for r in report.failures)}")
        raise typer.Exit(1)
    _err(
        f"{report.env} keeps the env protocol ({sum(r.verdict.value == 'passed' for r in report.results)} rules "
        f"passed, {sum(r.verdict.value == 'skipped' for r in report.results)} skipped)"
    )


@envs_app.command("list")
def list_envs() -> None:
    """The registered envs."""
    from roost.envs.registry import ENVS

    for spec in ENVS.values():
        typer.echo(f"{spec.name}\t{spec.description}")
