"""The gateway's answers to harness probes (`control/probes.py`), as hermes-agent reads them."""

from __future__ import annotations

import importlib.util

import httpx
import pytest

from roost.rollout.gateway.config import GatewayConfig
from roost.rollout.gateway.control.probes import routes as probe_routes
from roost.rollout.gateway.launch import GatewayThread
from roost.rollout.keys import bearer


def start_gateway(engine_url: str, store) -> GatewayThread:
    return GatewayThread(GatewayConfig(engine_url=engine_url, model="tiny", store_path=store, port=0))


def _with_probes(gateway_thread) -> None:
    # Until create_app mounts them, add the probe routes to the running app (routes are read per request).
    app = gateway_thread.server.config.app
    if not any(getattr(r, "path", "") == "/version" for r in app.router.routes):
        app.router.routes.extend(probe_routes(gateway_thread.gateway))


def test_probes_answer_at_the_root_and_under_sessions(scripted_engine_url, tmp_path):
    gateway = start_gateway(scripted_engine_url, tmp_path / "trajectories.sqlite")
    url = gateway.start()
    try:
        _with_probes(gateway)
        session = httpx.post(f"{url}/sessions", json={"group_id": "probe"}, headers=bearer(gateway.admin_key)).json()
        root = session["base_url"].removesuffix("/v1")
        for base in (url, root):
            http = httpx.Client(base_url=base, headers=bearer(session["key"]))  # a session's root takes its key
            assert http.get("/version").json()["server"] == "roost-gateway"
            card = http.get("/v1/models/tiny").json()
            assert card["id"] == "tiny" and card["max_model_len"] == 4096
            show = http.post("/api/show", json={"name": "tiny"}).json()
            assert show["model_info"]["general.context_length"] == 4096
            missing = http.get("/v1/models/other")
            assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
            # Not Ollama: a harness that believed so would add Ollama's options to its requests.
            assert http.get("/api/tags").status_code == 404
    finally:
        gateway.stop()


@pytest.mark.skipif(importlib.util.find_spec("run_agent") is None, reason="hermes-agent is not installed")
def test_hermes_agent_reads_the_window_from_the_gateway(scripted_engine_url, tmp_path):
    from roost.envs.hermes.process import default_config, prepare_process

    prepare_process(default_config(65_536))
    from agent.model_metadata import _query_ollama_api_show_uncached, detect_local_server_type

    gateway = start_gateway(scripted_engine_url, tmp_path / "trajectories.sqlite")
    url = gateway.start()
    try:
        _with_probes(gateway)
        session = httpx.post(f"{url}/sessions", json={"group_id": "probe"}, headers=bearer(gateway.admin_key)).json()
        assert detect_local_server_type(session["base_url"], api_key=session["key"]) == "vllm"
        assert _query_ollama_api_show_uncached("tiny", session["base_url"], api_key=session["key"]) == 4096
    finally:
        gateway.stop()
