"""Run an env server.

    python -m roost.envs.serve alfworld --host 0.0.0.0 --port 8000   # what containers run
    roost serve alfworld --port 8000                                 # the same, from the CLI
    python -m roost.envs.serve --config env.json --port 0            # a ServerConfig as JSON (`roost train`)

`serving(...)` runs one in the background of an asyncio program (tests, benchmarks,
`roost eval`) on a free port and yields its URL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ConfigDict

from roost.envs.episodes import EpisodeManager, ManagerConfig
from roost.envs.errors import EnvError
from roost.envs.worker import WorkerConfig
from roost.key_value import KeyValueError, parse_pair
from roost.lifetime import stop_on_sigterm
from roost.logging_setup import LogLevel, configure_logging
from roost.serving.config_file import ConfigFileError, read_config
from roost.serving.listen import PORT_FILE_HELP, bind_listener, report_port

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerConfig:
    """The env server's whole config; `--config FILE` reads it as JSON (what a training run writes)."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    env: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 8000
    manager: ManagerConfig = ManagerConfig()
    max_body_bytes: int = 1 << 20
    call_timeout_s: float | None = None
    """A worker that takes longer to answer one request is killed (its episodes fail);
    default: the env's own `EnvSpec.call_timeout_s`."""
    hang_timeout_s: float = WorkerConfig.hang_timeout_s
    """A worker silent this long (no heartbeat) is killed, even mid-request."""
    trace: bool = False
    """OpenTelemetry spans (`roost.tracing`; also on with the OTEL_* variables)."""
    port_file: Path | None = None
    """Where the port bound is written once listening (port 0: the one the OS picked)."""


def _spec(config: ServerConfig):
    from roost.envs.registry import resolve

    return resolve(config.env)


def build_manager(config: ServerConfig) -> EpisodeManager:
    timeout = config.call_timeout_s or _spec(config).call_timeout_s
    worker = WorkerConfig(config.env, config.env_kwargs, call_timeout_s=timeout, hang_timeout_s=config.hang_timeout_s)
    return EpisodeManager(worker, config.manager)


def build_app(config: ServerConfig, manager: EpisodeManager | None = None):
    from roost.envs.http_app import create_app
    from roost.tracing import Tracing

    manager = manager or build_manager(config)
    app = create_app(manager, max_body_bytes=config.max_body_bytes, tracing=Tracing.start("env", flag=config.trace))
    routes = _spec(config).load_routes()
    if routes is not None:  # the env's own pages (e.g. WebShop's web mode)
        app.include_router(routes(manager))
    return app


def _server(config: ServerConfig, manager: EpisodeManager | None = None):
    import uvicorn

    # log_config=None: uvicorn logs through the process's logging (`roost.logging_setup`)
    return uvicorn.Server(
        uvicorn.Config(build_app(config, manager), log_config=None, access_log=False, timeout_graceful_shutdown=5)
    )


async def serve(config: ServerConfig) -> None:
    """Serve until cancelled. The env loads before the port opens, so a broken env (no data,
    a bad entry point) raises its own error here instead of a failed server startup."""
    manager = build_manager(config)
    await manager.start()
    sock = bind_listener(config.host, config.port)
    port = report_port(sock, config.port_file)
    log.info(
        "env server for %s on http://%s:%d (%d workers, at most %d episodes)",
        config.env,
        config.host,
        port,
        config.manager.workers,
        config.manager.max_episodes,
        extra={"env": config.env, "workers": config.manager.workers},
    )
    await _server(config, manager).serve(sockets=[sock])


@contextlib.asynccontextmanager
async def serving(config: ServerConfig) -> AsyncIterator[str]:
    """Serve in the background (port 0 picks a free one); yields the base URL once healthy."""
    sock = bind_listener(config.host, config.port)
    server = _server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("env server stopped while starting")
            await asyncio.sleep(0.05)
        host, port = sock.getsockname()[:2]
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()


def parse_env_args(pairs: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` pairs, values in `roost.key_value`'s syntax (YAML, which takes JSON)."""
    try:
        return dict(map(parse_pair, pairs))
    except KeyValueError as exc:
        raise ValueError(f"env argument {exc}") from None


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    configure_logging(args.log_level, json=args.log_json)
    try:
        config = server_config(args)
    except (ConfigFileError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    try:
        with stop_on_sigterm():  # the workers stop, closing their episodes, before the server exits
            asyncio.run(serve(config))
    except EnvError as exc:
        raise SystemExit(f"error: {exc}") from None


def _parser() -> argparse.ArgumentParser:
    # Defaults are None: with --config, only the flags given override the file (`server_config`).
    parser = argparse.ArgumentParser(prog="python -m roost.envs.serve", description=__doc__.split("\n")[0])
    parser.add_argument("env", nargs="?", help="registry name (alfworld) or module:function entry point")
    parser.add_argument("--config", type=Path, help="the whole ServerConfig as JSON (what a training run writes)")
    parser.add_argument("--host", help="default 127.0.0.1")
    parser.add_argument("--port", type=int, help="default 8000; 0: any free port (see --port-file)")
    parser.add_argument("--port-file", type=Path, help=PORT_FILE_HELP)
    parser.add_argument("--workers", type=int, help="default: one per CPU")
    parser.add_argument("--max-episodes", type=int, help=f"default {ManagerConfig.max_episodes}")
    parser.add_argument("--lease-s", type=float, help=f"default {ManagerConfig.lease_s}")
    parser.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--trace", action="store_true", default=None, help="OpenTelemetry spans (also OTEL_*)")
    parser.add_argument("--log-level", choices=[level.value for level in LogLevel], default=LogLevel.info.value)
    parser.add_argument("--log-json", action="store_true", help="one JSON object per log line")
    return parser


def server_config(args: argparse.Namespace) -> ServerConfig:
    """The file's config (`--config`), else one for the ENV argument, with the flags given over it."""
    from dataclasses import replace

    if args.config is not None:
        base = read_config(ServerConfig, args.config, {})
    elif args.env:
        base = ServerConfig(args.env, manager=ManagerConfig(workers=os.cpu_count() or 1))
    else:
        raise ValueError("name the env to serve (ENV) or pass its whole config as --config FILE")
    flags = {"env": args.env, "host": args.host, "port": args.port, "port_file": args.port_file, "trace": args.trace}
    manager = {"workers": args.workers, "max_episodes": args.max_episodes, "lease_s": args.lease_s}
    return replace(
        base,
        **{name: value for name, value in flags.items() if value is not None},
        env_kwargs={**base.env_kwargs, **parse_env_args(args.env_arg)},
        manager=replace(base.manager, **{name: value for name, value in manager.items() if value is not None}),
    )


if __name__ == "__main__":
    main()
