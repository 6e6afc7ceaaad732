"""A killed env server (SIGKILL) leaves no worker behind: each worker ends with it, even one
busy in a step, and closes its episodes' envs (their sandboxes) on the way out."""

from __future__ import annotations

import subprocess
import sys

import httpx
import psutil
import pytest

from roost.tests.child_processes import assert_gone
from roost.rollout.server_process import free_port, wait_healthy

TOY = "roost.tests.envs.toy_envs:make_factory"


def test_a_killed_server_takes_its_workers_and_their_episodes_along(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "roost.cli.main", "serve", TOY, "--port", str(port),
                               "--workers", "2", "--env-arg", f"closed_dir={tmp_path}"], start_new_session=True)
    workers: list[psutil.Process] = []
    try:
        wait_healthy(server, url, "roost serve", timeout_s=120)
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
