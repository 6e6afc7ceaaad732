"""The engine's control routes take its key (as SGLang's --api-key); generating, the info routes
and /health stay open; `roost engine` binds beyond loopback only with a key it was given."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from roost.rollout.engine_api.sglang_client import EngineRejected, SGLangClient
from roost.rollout.keys import bearer

FALLBACK = {"rules": [{"match": None, "reply": "OK."}]}  # the scripted engine's own script (tests/conftest.py)
# (path, body): every route that changes the engine
CONTROL = [
    ("/update_weights_from_disk", {"model_path": "/nonexistent", "weight_version": "stolen"}),
    ("/pause_generation", {"mode": "in_place"}),
    ("/continue_generation", {}),
    ("/flush_cache", None),
    ("/roost/scripted_sampler", {"rules": [{"match": None, "reply": "owned"}]}),
]


def server_info(url: str) -> dict:
    return httpx.get(f"{url}/get_server_info").json()


def reply(url: str) -> str:
    resp = httpx.post(f"{url}/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 8}}, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()["text"]


@pytest.mark.parametrize("path,body", CONTROL, ids=[p for p, _ in CONTROL])
def test_control_routes_refuse_a_missing_or_wrong_key_and_change_nothing(scripted_engine, path, body):
    url = scripted_engine.url
    before = server_info(url)
    for headers in ({}, bearer("rek-not-the-key"), {"Authorization": scripted_engine.api_key}):
        resp = httpx.post(f"{url}{path}", json=body, headers=headers, timeout=30)
        assert resp.status_code == 401, resp.text
        assert resp.json()["error"]["type"] == "authentication_error"
        assert resp.headers["www-authenticate"] == "Bearer"
    after = server_info(url)
    assert (after["paused"], after["weight_version"]) == (False, before["weight_version"])
    assert reply(url) == "OK."


def test_control_routes_take_the_key_as_bearer_or_x_api_key(scripted_engine):
    url, key = scripted_engine.url, scripted_engine.api_key
    pause = httpx.post(f"{url}/pause_generation", json={"mode": "in_place"}, headers=bearer(key))
    assert pause.status_code == 200 and server_info(url)["paused"] is True
    resume = httpx.post(f"{url}/continue_generation", json={}, headers={"x-api-key": key})
    assert resume.status_code == 200 and server_info(url)["paused"] is False
    assert httpx.post(f"{url}/flush_cache", headers=bearer(key)).status_code == 200
    script = httpx.post(f"{url}/roost/scripted_sampler", json=FALLBACK, headers=bearer(key))
    assert script.status_code == 200 and reply(url) == "OK."


def test_generating_the_info_routes_and_health_are_open(scripted_engine):
    url = scripted_engine.url
    for path in ("/health", "/health_generate", "/get_model_info", "/get_server_info"):
        assert httpx.get(f"{url}{path}").status_code == 200, path
    assert reply(url) == "OK."


async def test_the_sglang_client_sends_its_key(scripted_engine):
    async with SGLangClient(scripted_engine.url) as keyless:
        with pytest.raises(EngineRejected) as refused:
            await keyless.flush_cache()
        assert refused.value.status == 401
    async with SGLangClient(scripted_engine.url, api_key=scripted_engine.api_key) as client:
        assert (await client.pause_generation())["paused"] is True
        assert (await client.continue_generation())["paused"] is False
        generation = await client.generate([1, 2, 3], {"max_new_tokens": 4})
        assert generation.output_ids


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3"])
def test_the_engine_binds_beyond_loopback_only_with_a_key(host):
    clean = {k: v for k, v in os.environ.items() if k != "ROOST_ENGINE_KEY"}
    command = [sys.executable, "-m", "roost.cli.main", "engine", "--host", host, "--port", "0"]
    done = subprocess.run(command, env=clean, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "beyond loopback" in done.stderr and "--api-key" in done.stderr and "ROOST_ENGINE_KEY" in done.stderr
