"""Serving the gateway: in this process (uvicorn), on a background thread (tests), or
as a `roost gateway` subprocess (benchmarks, crash tests)."""

from __future__ import annotations

from pathlib import Path

from roost.rollout.gateway.config import GatewayConfig
from roost.rollout.keys import ADMIN_KEY, new_key
from roost.serving.listen import bind_listener, report_port
from roost.serving.process import ServerProcess
from roost.serving.thread import UvicornThread


def _uvicorn_config(app, host: str, **settings):
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        loop="uvloop" if _has("uvloop") else "asyncio",
        http="httptools" if _has("httptools") else "h11",
        log_config=None,
        access_log=False,
        backlog=4096,
        timeout_keep_alive=30,
        **settings,
    )


def _gateway_config(config: GatewayConfig):
    from roost.rollout.gateway.app import create_app

    return _uvicorn_config(create_app(config), config.host)


def _relay_config(config: GatewayConfig, log_args: list[str]):
    from roost.rollout.gateway.workers.relay import Relay

    # the workers' own Server and Date headers pass through
    return _uvicorn_config(Relay(config, log_args=log_args), config.host, server_header=False, date_header=False)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def serve(config: GatewayConfig, port_file: Path | None = None, *, log_args: list[str] | None = None) -> None:
    """Serve until stopped (port 0: any free port, written to `port_file`); logs go where the
    process's logging sends them (`roost.logging_setup`). With `config.workers` > 1 this process
    relays to that many gateway workers (`log_args`: their logging flags)."""
    import uvicorn

    sock = bind_listener(config.host, config.port)
    uv = _relay_config(config, log_args or []) if config.workers > 1 else _gateway_config(config)
    report_port(sock, port_file)
    try:
        uvicorn.Server(uv).run(sockets=[sock])
    finally:
        sock.close()


class GatewayThread(UvicornThread):
    """A real gateway on 127.0.0.1 in a background thread of this process; a `ServerHandle`.
    It binds `port` (default 0: any free one), not `config.port`, whose default is the CLI's.
    `admin_key` is the key of its control plane (the config's, generated unless given).

    >>> with GatewayThread(GatewayConfig(engine_url=..., model="tiny", store_path=...)) as url: ...
    """

    def __init__(self, config: GatewayConfig, startup_timeout_s: float = 60.0, *, port: int = 0):
        self.config = config
        self.admin_key = config.admin_key
        super().__init__(_gateway_config(config), "the gateway", startup_timeout_s, port=port)

    @property
    def gateway(self):
        return self.server.config.app.state.gateway


class GatewayProcess(ServerProcess):
    """`roost gateway ...` in a subprocess on the port it binds; a `ServerHandle`. `admin_key` is
    the key of its control plane (generated here, handed over in the environment)."""

    def __init__(self, args: list[str], *, port: int = 0, startup_timeout_s: float = 120.0):
        self.admin_key = new_key(ADMIN_KEY)
        super().__init__(
            "gateway", args, port=port, startup_timeout_s=startup_timeout_s, env={ADMIN_KEY.env: self.admin_key}
        )
