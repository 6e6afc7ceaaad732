"""The trainer starts roost's servers from their typed configs: each actor writes the config to
`logs/<name>.json` and the server reads it whole (`--config`), flags given on the command line
(the recipe's pass-through `engine.args`, a restart's `--port`) over it, and keys only in the
environment. Real servers on 127.0.0.1, read back through their own routes."""

from __future__ import annotations

import json
import re
import sys

import httpx
import pytest

from roost.rollout.keys import ADMIN_KEY, ENGINE_KEY, new_key
from roost.trainer.recipe import validate_recipe
from roost.trainer.rl.services import (
    SupervisedServer,
    engine_env,
    engine_launch,
    env_config,
    gateway_config,
    server_command,
)

pytestmark = pytest.mark.slow

TOY = "roost.tests.envs.toy_envs:make_factory"
HOST = "127.0.0.1"


def recipe():
    return validate_recipe(
        {
            "name": "services",
            "env": {"name": TOY, "server": {"workers": 1, "max_episodes": 3}},
            # --max-running on the command line wins over engine.max_running in the config
            "engine": {"backend": "embedded", "max_running": 5, "args": ["--max-running", "3"]},
            "gateway": {"reasoning_policy": "drop"},
        }
    )


def metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))


def test_the_env_server_reads_the_trainers_config(tmp_path):
    config = env_config(recipe(), {"target": 2}, HOST)
    env = {"PYTHONPATH": ":".join(p for p in sys.path if p)}
    server = SupervisedServer("env", server_command("env"), HOST, 0, log_dir=tmp_path, env=env, config=config)
    url = server.start()
    try:
        info = httpx.get(f"{url}/info", timeout=10).json()
        assert info["max_episodes"] == 3 and metric(url, "roost_env_workers_wanted") == 1
        written = json.loads((tmp_path / "env.json").read_text())
        assert (written["env"], written["env_kwargs"], written["manager"]["max_episodes"], written["port"]) == (
            TOY,
            {"target": 2},
            3,
            0,
        )
    finally:
        server.stop()


def test_engine_and_gateway_read_the_trainers_configs_and_keep_their_ports(tmp_path):
    r = recipe()
    engine_key, admin_key = new_key(ENGINE_KEY), new_key(ADMIN_KEY)
    command, config = engine_launch(r, "tiny", HOST, 0, engine_key, tmp_path)
    assert command[-2:] == ["--max-running", "3"] and config.max_running == 5
    engine = SupervisedServer(
        "engine", command, HOST, 0, log_dir=tmp_path, env=engine_env(r, engine_key), config=config
    )
    engine_url = engine.start()
    store = tmp_path / "trajectories.sqlite"
    gateway = SupervisedServer(
        "gateway",
        server_command("gateway"),
        HOST,
        0,
        log_dir=tmp_path,
        env={ENGINE_KEY.env: engine_key, ADMIN_KEY.env: admin_key},
        config=gateway_config(r, [engine_url], "tiny", store, HOST),
    )
    try:
        assert metric(engine_url, "roost_engine_max_running_requests") == 3
        url = gateway.start()
        created = httpx.post(
            f"{url}/sessions", json={"group_id": "g"}, headers={"Authorization": f"Bearer {admin_key}"}, timeout=10
        )
        assert created.status_code == 201, created.text
        assert created.json()["reasoning_policy"] == "drop"  # the recipe's, through the config
        written = (tmp_path / "gateway.json").read_text()
        assert admin_key not in written and engine_key not in written and "admin_key" not in written
        assert store.exists()
        port = gateway.port
        gateway.kill()
        gateway.process.wait(30)
        assert gateway.wait_serving(120) and gateway.port == port  # --port over the file's port 0
    finally:
        gateway.stop()
        engine.stop()
