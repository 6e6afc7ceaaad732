"""`roost serve` and `roost envs ...`: thin layers over roost.envs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from roost.logging_setup import LogLevel, configure_logging, json_option, level_option

envs_app = typer.Typer(help="Environments: list them and prepare their data.", no_args_is_help=True)
alfworld_app = typer.Typer(help="ALFWorld games: offline fixtures or the official download.", no_args_is_help=True)
envs_app.add_typer(alfworld_app, name="alfworld")


def _env_subcommands() -> None:
    from roost.envs.hermes.cli import register as register_hermes
    from roost.envs.osworld.cli import register as register_osworld
    from roost.envs.swe.cli import register as register_swe
    from roost.envs.webshop.cli import webshop_app

    register_swe(envs_app)
    register_hermes(envs_app)
    register_osworld(envs_app)
    envs_app.add_typer(webshop_app, name="webshop")


def register(app: typer.Typer, bench: typer.Typer) -> None:
    app.command("serve")(serve)
    _env_subcommands()
    app.add_typer(envs_app, name="envs")


def _err(message: str) -> None:
    typer.echo(message, err=True)


def serve(
    env: str = typer.Argument(..., help="Env name (see `roost envs list`) or module:function entry point."),
    host: str = typer.Option("127.0.0.1", help="Interface to listen on."),
    port: int = typer.Option(8000, help="Port to listen on (with --docker: the host port)."),
    workers: int = typer.Option(os.cpu_count() or 1, help="Worker processes hosting episodes."),
    max_episodes: int = typer.Option(64, help="Live episodes before 429."),
    lease_s: float = typer.Option(600.0, help="Idle seconds before an episode is reaped."),
    env_arg: list[str] = typer.Option([], "--env-arg", help="KEY=VALUE passed to the env (repeatable)."),
    data_dir: Optional[Path] = typer.Option(None, help="The env's data (ALFWorld: the folder holding json_2.1.1; OSWorld: the task folder)."),
    docker: bool = typer.Option(False, "--docker", help="Build the env's image once and serve from a container."),
    base_image: Optional[str] = typer.Option(None, help="BASE_IMAGE of the Docker build (default: $ROOST_BASE_IMAGE)."),
    trace: bool = typer.Option(False, "--trace", help="OpenTelemetry spans over OTLP/HTTP (also on with the OTEL_* "
                                                      "variables; docs/tracing.md)."),
    log_level: LogLevel = level_option(),
    log_json: bool = json_option(),
) -> None:
    """Serve an env over HTTP (POST /episodes, /episodes/{id}/step, GET /tasks, /info, /health, /metrics)."""
    import asyncio

    from roost.envs.episodes import ManagerConfig
    from roost.envs.serve import ServerConfig, parse_env_args
    from roost.envs.serve import serve as run_server

    configure_logging(log_level, json=log_json)
    server_args = ["--workers", str(workers), "--max-episodes", str(max_episodes), "--lease-s", str(lease_s),
                   "--log-level", log_level.value, *(["--log-json"] if log_json else [])]
    if docker:
        _serve_docker(env, port, data_dir, base_image, server_args + [a for p in env_arg for a in ("--env-arg", p)])
        return
    kwargs = parse_env_args(env_arg)
    if data_dir is not None:
        kwargs["data_dir"] = str(data_dir)
    manager = ManagerConfig(workers=workers, max_episodes=max_episodes, lease_s=lease_s)
    config = ServerConfig(env, kwargs, host, port, manager, trace=trace)
    from roost.envs.errors import EnvError

    _err(f"starting {env} on http://{host}:{port} ({workers} workers, max {max_episodes} episodes)")
    try:
        asyncio.run(run_server(config))
    except EnvError as exc:
        _err(f"error: {exc}")
        raise typer.Exit(1) from None


def _serve_docker(env: str, port: int, data_dir: Optional[Path], base_image: Optional[str],
                  server_args: list[str]) -> None:
    import signal
    import threading

    from roost.envs.containers import ContainerConfig, EnvContainer, docker_client, ensure_image
    from roost.envs.registry import resolve

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
        url = container.start()
        # A process started in the background inherits SIGINT ignored; it must still stop on it.
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        _err(f"serving {env} from container {container.container.short_id} ({image}) on {url}; Ctrl-C stops it")
        while not stop.wait(1):
            pass
    except KeyboardInterrupt:  # Ctrl-C while the image builds or the container starts
        pass
    finally:
        container.stop()


@envs_app.command("list")
def list_envs() -> None:
    """The registered envs."""
    from roost.envs.registry import ENVS

    for spec in ENVS.values():
        typer.echo(f"{spec.name}\t{spec.description}")


@alfworld_app.command("make-fixtures")
def make_fixtures(
    out: Optional[Path] = typer.Option(None, help="Output folder (default: $ROOST_HOME/alfworld, else "
                                                  "~/.cache/roost/alfworld)."),
    train: int = typer.Option(6, help="Games in train."),
    valid_seen: int = typer.Option(3, help="Games in valid_seen."),
    valid_unseen: int = typer.Option(3, help="Games in valid_unseen."),
    receptacles: int = typer.Option(6, help="Receptacles per room, counting the task's own "
                                            "(at least 2 or 3, by task type)."),
    distractors: int = typer.Option(4, help="Objects per room besides the task's own."),
    task_type: list[str] = typer.Option([], "--task-type", help="Task types to cycle through (default: all six)."),
    seed: int = typer.Option(0, help="Seed of the generator."),
    force: bool = typer.Option(False, "--force", help="Replace an existing json_2.1.1 in the output folder."),
    as_json: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Generate a small, valid ALFWorld game set offline (official json_2.1.1 layout, planner-checked)."""
    import shutil

    from roost.envs.alfworld.catalog import fixtures_dir
    from roost.envs.alfworld.fixtures import FixtureSpec
    from roost.envs.alfworld.fixtures import make_fixtures as generate
    from roost.envs.alfworld.gamegen import TASK_TYPES, GameSize, GameSpecError

    out = out or fixtures_dir()
    if (out / "json_2.1.1").exists():
        if not force:
            _err(f"{out / 'json_2.1.1'} exists; pass --force to replace it")
            raise typer.Exit(1)
        shutil.rmtree(out / "json_2.1.1")
    spec = FixtureSpec({"train": train, "valid_seen": valid_seen, "valid_unseen": valid_unseen},
                       GameSize(receptacles, distractors), tuple(task_type) or TASK_TYPES, seed)
    try:
        games = generate(out, spec)
    except GameSpecError as exc:
        _err(f"error: {exc}")
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps([{"split": g.split, "task_type": g.task_type, "gamefile": str(g.path),
                                "walkthrough": g.walkthrough} for g in games], indent=1))
        return
    for split in ("train", "valid_seen", "valid_unseen"):
        types = sorted({g.task_type for g in games if g.split == split})
        _err(f"{split}: {sum(g.split == split for g in games)} games ({', '.join(types)})")
    typer.echo(str(out))


@alfworld_app.command("download")
def download(
    data_dir: Optional[Path] = typer.Option(None, help="Where to put the data (default: $ALFWORLD_DATA, else "
                                                       "~/.cache/alfworld)."),
) -> None:
    """Fetch the official ALFWorld data with `alfworld-download` (needs internet), then check it."""
    import subprocess

    from roost.envs.alfworld.catalog import AlfworldDataMissing, GameCatalog

    data_dir = data_dir or Path(os.environ.get("ALFWORLD_DATA", "~/.cache/alfworld")).expanduser()
    script = Path(sys.executable).with_name("alfworld-download")
    command = [str(script) if script.exists() else "alfworld-download", "--data-dir", str(data_dir)]
    code = subprocess.call(command)
    # alfworld-download can exit 0 without having fetched anything: look for the games.
    try:
        catalog = GameCatalog.load(data_dir)
    except AlfworldDataMissing as exc:
        _err(f"alfworld-download exited {code} but left no playable games: {exc}")
        raise typer.Exit(1) from None
    counts = ", ".join(f"{split}: {len(games)}" for split, games in catalog.games.items())
    _err(f"ALFWorld data in {data_dir} ({counts})")
