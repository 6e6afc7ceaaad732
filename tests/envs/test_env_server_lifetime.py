"""A killed env server (SIGKILL) leaves no worker behind: each worker ends with it, even one
busy in a step, and closes its episodes' envs (their sandboxes) on the way out."""

from __future__ import annotations

import sys

import httpx
import psutil
import pytest

from roost.serving.process import start_reporting
from roost.tests.child_processes import assert_gone

TOY = "roost.tests.envs.toy_envs:make_factory"


def test_a_killed_server_takes_its_workers_and_their_episodes_along(tmp_path):
    port_file = tmp_path.parent / f"{tmp_path.name}.port"  # the closed_dir folder holds only episodes
    server, port = start_reporting(
        [
            sys.executable,
            "-m",
            "roost.cli.main",
            "serve",
            TOY,
            "--port",
            "0",
            "--port-file",
            str(port_file),
            "--workers",
            "2",
            "--env-arg",
            f"closed_dir={tmp_path}",
        ],
        port_file,
        "roost serve",
        120,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    workers: list[psutil.Process] = []
    try:
        workers = psutil.Process(server.pid).children()
        assert len(workers) == 2
        busy = httpx.post(f"{url}/episodes", json={"task_id": "busy"}).json()["episode_id"]
        httpx.post(f"{url}/episodes", json={"task_id": "idle"}).raise_for_status()  # on the other worker
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/episodes/{busy}/step", json={"action": {"type": "text", "text": "hang"}}, timeout=1)
        server.kill()
        server.wait()
        assert_gone(workers)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["busy", "idle"]
    finally:
        server.kill()
        server.wait()
