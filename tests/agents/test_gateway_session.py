"""The gateway's control-plane client against a real gateway: it sends the gateway's request
models and reads its answers with the answer models, so both ends share one definition."""

from __future__ import annotations

import ast
import subprocess
import sys

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from roost.outcome import EpisodeOutcome, RewardSource
from roost.rollout.gateway.control.client import ControlPlaneError, GatewayClient, is_gateway
from roost.rollout.gateway.control.wire import PauseState, SessionCreated
from roost.rollout.keys import bearer


async def test_a_session_from_creation_to_finish(scripted_gateway: str, admin_key: str):
    async with GatewayClient(scripted_gateway, admin_key=admin_key) as gateway:
        session = await gateway.create_session("run/t1", {"id": "t1"}, {"agent": "expert"})
        assert isinstance(session, SessionCreated) and session.group_id == "run/t1"
        assert session.base_url == f"{scripted_gateway}/sessions/{session.session_id}/v1"
        async with httpx.AsyncClient(timeout=60) as http:
            for _ in range(2):
                reply = await http.post(
                    f"{session.base_url}/chat/completions",
                    headers=bearer(session.key),
                    json={"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3},
                )
                assert reply.status_code == 200, reply.text
        calls = await gateway.call_ids(session.session_id)
        await gateway.post_reward(session.session_id, -0.25, {"invalid_actions": 1}, call_id=calls[1])
        await gateway.post_reward(session.session_id, 1, {"success": True})
        await gateway.finish(session.session_id, EpisodeOutcome(reward=1.0, reward_source=RewardSource.ENV), steps=2)
        with pytest.raises(ControlPlaneError, match="404"):
            await gateway.call_ids("no-such-session")
    detail = httpx.get(f"{scripted_gateway}/sessions/{session.session_id}", headers=bearer(admin_key)).json()
    assert [c["call_id"] for c in sorted(detail["calls"], key=lambda c: c["seq"])] == calls and len(calls) == 2
    assert detail["rewards"] == [
        {"reward": -0.25, "agent": None, "call_id": calls[1], "info": {"invalid_actions": 1}},
        {"reward": 1.0, "agent": None, "call_id": None, "info": {"success": True}},
    ]
    assert (detail["status"], detail["finish_info"]) == ("finished", {"steps": 2})
    assert detail["outcome"] == {"status": "ok", "reward": 1.0, "reward_source": "env", "kind": "train", "reason": None}


async def test_pause_and_resume_answer_the_pause_state(scripted_gateway: str, admin_key: str):
    async with GatewayClient(scripted_gateway, admin_key=admin_key) as gateway:
        paused = await gateway.pause()
        assert httpx.get(f"{scripted_gateway}/health").json()["paused"] is True
        resumed = await gateway.resume()
    assert paused == PauseState(paused=True, drained=True, in_flight=0)
    assert resumed == PauseState(paused=False, in_flight=0) and "drained" not in resumed.model_fields_set
    assert httpx.get(f"{scripted_gateway}/health").json()["paused"] is False


async def test_without_the_admin_key_the_gateway_refuses(scripted_gateway: str):
    async with GatewayClient(scripted_gateway, admin_key=None) as gateway:
        with pytest.raises(ControlPlaneError, match="401"):
            await gateway.pause()


async def test_an_answer_that_is_not_the_gateways_is_an_error_naming_the_model():
    async def pause(_: web.Request) -> web.Response:
        return web.json_response({"paused": True})  # no in_flight: not a roost gateway's answer

    app = web.Application()
    app.router.add_post("/admin/pause", pause)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    url = f"http://127.0.0.1:{server.port}"
    try:
        async with GatewayClient(url, admin_key="rak-x") as gateway:
            with pytest.raises(ControlPlaneError, match="PauseState"):
                await gateway.pause()
        assert not await is_gateway(url)  # no /health at all
    finally:
        await server.close()


async def test_a_gateway_is_told_from_a_plain_engine(scripted_gateway: str, scripted_engine_url: str):
    assert await is_gateway(scripted_gateway)
    assert not await is_gateway(scripted_engine_url)  # its /health answers, but not a gateway's health


def test_the_clients_import_the_wire_modules_and_nothing_else_of_the_servers():
    clients = ("roost.rollout.gateway.control.client", "roost.rollout.engine_api.sglang_client")
    code = (
        f"import sys, {', '.join(clients)}; print(sorted(m for m in sys.modules "
        "if m.startswith(('roost.rollout.gateway', 'roost.rollout.engine', 'starlette', 'fastapi', 'uvicorn'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    packages = [
        "roost.rollout.engine_api",
        "roost.rollout.gateway",
        "roost.rollout.gateway.control",
        "roost.rollout.gateway.core",
    ]
    client_parts = [
        "roost.rollout.engine_api.capacity",
        "roost.rollout.engine_api.routed_experts",
        "roost.rollout.engine_api.sglang_sessions",
    ]
    wires = [
        "roost.rollout.engine_api.wire",
        "roost.rollout.gateway.control.wire",
        "roost.rollout.gateway.core.wire_base",
    ]
    assert ast.literal_eval(out) == sorted([*clients, *client_parts, *packages, *wires])
