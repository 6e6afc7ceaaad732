"""Servers bind port 0 themselves and report the port they got: a launcher reads the real port
back, and servers started together never collide."""

from __future__ import annotations

import socket
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from roost.serving.handle import ServerHandle
from roost.serving.listen import bind_listener, bound_port
from roost.serving.process import ServerProcess
from roost.serving.thread import UvicornThread
from roost.trainer.rl.services import SupervisedServer

TOY = "roost.tests.envs.toy_envs:make_factory"


def env_server() -> ServerProcess:
    return ServerProcess("serve", [TOY, "--workers", "1"], startup_timeout_s=120)


def health_app() -> FastAPI:
    app = FastAPI()
    app.get("/health")(lambda: {"status": "ok"})
    return app


def test_a_server_started_on_port_0_reports_the_port_it_serves_on():
    server = env_server()
    with server as url:
        assert server.port != 0 and url == f"http://127.0.0.1:{server.port}"
        assert httpx.get(f"{url}/health").status_code == 200
        with pytest.raises(OSError, match="--port 0"):  # the port is the server's: nobody else binds it
            bind_listener("127.0.0.1", server.port)
    assert not server.healthy()


def test_servers_started_at_once_each_get_their_own_port():
    servers = [env_server() for _ in range(3)]
    # the pool stays open while they serve: a server dies with the thread that started it
    with ThreadPoolExecutor(len(servers)) as pool:
        try:
            urls = list(pool.map(lambda s: s.start(), servers))
            assert len(set(urls)) == len(servers)
            assert all(httpx.get(f"{url}/health").status_code == 200 for url in urls)
        finally:
            for server in servers:
                server.stop()


def test_threads_started_at_once_each_get_their_own_port():
    threads = [UvicornThread(uvicorn.Config(health_app(), log_level="warning"), f"app {i}") for i in range(16)]
    with ThreadPoolExecutor(8) as pool:
        urls = list(pool.map(lambda t: t.start(), threads))
    try:
        assert len(set(urls)) == len(threads) and all(t.healthy() for t in threads)
    finally:
        for thread in threads:
            thread.stop()


def test_a_taken_port_is_refused_naming_the_fix():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError, match=r"cannot bind 127\.0\.0\.1:\d+ .*pass --port 0"):
            bind_listener("127.0.0.1", taken.getsockname()[1])


def test_a_bound_socket_refuses_connections_until_served():
    with bind_listener() as sock:
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{bound_port(sock)}/health", timeout=2)


def test_a_supervised_server_comes_back_on_the_port_it_got(tmp_path):
    command = [sys.executable, "-m", "roost.envs.serve", TOY, "--port", "0", "--workers", "1"]
    server = SupervisedServer("env", command, "127.0.0.1", log_dir=tmp_path, startup_timeout_s=120)
    url = server.start()
    try:
        first = server.port
        assert first != 0 and server.healthy()
        server.kill()
        server.process.wait(30)
        assert server.wait_serving(120) and server.port == first and server.url == url
        assert server.restarts == 1
    finally:
        server.stop()


def test_every_launcher_is_a_server_handle(tmp_path):
    from roost.rollout.engine.launch import EngineProcess
    from roost.rollout.gateway.config import GatewayConfig
    from roost.rollout.gateway.launch import GatewayProcess, GatewayThread

    thread = GatewayThread(GatewayConfig(engine_url="http://127.0.0.1:9", model="tiny", store_path=tmp_path / "t"))
    try:
        handles = [
            env_server(),
            EngineProcess(),
            GatewayProcess([]),
            thread,
            SupervisedServer("env", [], "127.0.0.1", log_dir=tmp_path),
            UvicornThread(uvicorn.Config(health_app())),
        ]
        assert all(isinstance(handle, ServerHandle) for handle in handles)
    finally:
        thread.stop()
