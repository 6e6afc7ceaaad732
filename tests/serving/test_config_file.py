"""`--config FILE` on each roost server: a file that is not the server's config is refused with
exit status 2 (1 for the env server's argparse front) and a message naming the file, the field
and what to do, before anything starts; secrets never reach the file."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from roost.rollout.engine.server_config import EngineServerConfig
from roost.rollout.gateway.config import GatewayConfig
from roost.serving.config_file import ConfigFileError, read_config, write_config

ROOST = [sys.executable, "-m", "roost.cli.main"]
ENV_SERVE = [sys.executable, "-m", "roost.envs.serve"]


def run(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})


@pytest.mark.parametrize(
    "server, command",
    [("engine", [*ROOST, "engine"]), ("gateway", [*ROOST, "gateway"]), ("env", ENV_SERVE)],
)
def test_an_unknown_field_is_refused_by_name(tmp_path, server, command):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"prot": 0}))
    done = run([*command, "--config", str(path)])
    assert done.returncode != 0
    assert f"--config {path}" in done.stderr and "prot" in done.stderr, done.stderr
    assert "expected a JSON object" in done.stderr


@pytest.mark.parametrize("text, why", [("{not json", "not JSON"), ("[1, 2]", "a JSON list")])
def test_a_file_that_is_no_json_object_is_refused(tmp_path, text, why):
    path = tmp_path / "engine.json"
    path.write_text(text)
    done = run([*ROOST, "engine", "--config", str(path)])
    assert done.returncode == 2 and why in done.stderr, done.stderr


def test_a_missing_file_is_refused():
    done = run([*ROOST, "gateway", "--config", "/nonexistent/gateway.json"])
    assert done.returncode == 2 and "cannot read it" in done.stderr, done.stderr


def test_the_env_server_needs_an_env_or_a_config():
    done = run(ENV_SERVE)
    assert done.returncode != 0 and "name the env to serve (ENV) or pass its whole config" in done.stderr


def test_flags_given_override_the_file_and_the_rest_keep_it(tmp_path):
    path = write_config(EngineServerConfig(model="m", port=0, max_running=5), tmp_path / "engine.json")
    config = read_config(EngineServerConfig, path, {"max_running": 3})
    assert (config.model, config.port, config.max_running) == ("m", 0, 3)
    with pytest.raises(ConfigFileError, match="max_running"):
        read_config(EngineServerConfig, path, {"max_running": 0})


def test_the_gateways_keys_stay_out_of_its_file(tmp_path):
    config = GatewayConfig(admin_key="adm-secret-1", engine_key="eng-secret", upstream_api_key="up-secret", port=0)
    text = write_config(config, tmp_path / "gateway.json").read_text()
    assert "secret" not in text and "_key" not in text
    back = read_config(GatewayConfig, tmp_path / "gateway.json", {"admin_key": "adm-secret-2"})
    assert back.model_copy(update={"admin_key": config.admin_key}) == config.model_copy(
        update={"engine_key": None, "upstream_api_key": None}
    )
