"""Keys on every door of the gateway: a session's paths take that session's key, the control
plane and trajectory reads take the admin key, /health and /metrics are open, session ids are
plain tokens, and `roost gateway` binds beyond loopback only with an admin key it was given."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import httpx
import pytest

from roost.rollout.keys import bearer
from roost.rollout.store.reader import TrajectoryReader
from roost.serving.process import start_reporting, stop_process
from roost.tests.rollout.gateway_helpers import running_gateway, say, stored_calls

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], **say("Hello.")}
TEXT = {"model": "tiny", "prompt": "hi", "max_tokens": 2}


@pytest.fixture(scope="module")
def gateway(scripted_engine_url, tmp_path_factory):
    with running_gateway(scripted_engine_url, tmp_path_factory.mktemp("store") / "trajectories.sqlite") as running:
        yield running


def open_session(server, **body) -> dict:
    resp = httpx.post(f"{server.url}/sessions", json=body, headers=bearer(server.admin_key))
    assert resp.status_code == 201, resp.text
    return resp.json()


def assert_401(resp: httpx.Response) -> None:
    assert resp.status_code == 401, resp.text
    error = resp.json()["error"]
    assert error["type"] == "authentication_error" and error["code"] == "invalid_api_key"


# (method, path under /sessions/{sid}, body): every route a session's key opens
SESSION_ROUTES = [
    ("POST", "/v1/chat/completions", CHAT),
    ("POST", "/v1/completions", TEXT),
    ("GET", "/v1/models", None),
    ("POST", "/agents/helper/v1/chat/completions", CHAT),
    ("GET", "/agents/helper/v1/models", None),
    ("GET", "/version", None),
    ("GET", "/v1/models/tiny", None),
    ("POST", "/api/show", {"model": "tiny"}),
    ("GET", "/agents/helper/version", None),
]


@pytest.mark.parametrize("method,path,body", SESSION_ROUTES, ids=[f"{m} {p}" for m, p, _ in SESSION_ROUTES])
def test_a_sessions_paths_take_only_that_sessions_key(gateway, method, path, body):
    server, store = gateway
    mine, other = open_session(server), open_session(server)
    url = f"{server.url}/sessions/{mine['session_id']}{path}"
    refused = [
        {},
        bearer("rsk-not-a-key"),
        bearer(other["key"]),
        bearer("EMPTY"),
        {"x-api-key": other["key"]},
        {"Authorization": mine["key"]},
    ]  # the key without "Bearer " is not a bearer token
    for headers in refused:
        assert_401(httpx.request(method, url, json=body, headers=headers, timeout=30))
    assert stored_calls(store, mine["session_id"]) == [] and stored_calls(store, other["session_id"]) == []
    for headers in (bearer(mine["key"]), {"x-api-key": mine["key"]}):
        resp = httpx.request(method, url, json=body, headers=headers, timeout=30)
        assert resp.status_code == 200, resp.text
    assert stored_calls(store, other["session_id"]) == []


def test_a_non_session_key_on_another_sessions_path_records_nothing(gateway):
    """The hole this closes: B's path with a key that does not start `rsk-` answered 200 and
    recorded into B."""
    server, store = gateway
    victim = open_session(server)
    resp = httpx.post(f"{victim['base_url']}/chat/completions", json=CHAT, headers=bearer("sk-anything"), timeout=30)
    assert_401(resp)
    assert stored_calls(store, victim["session_id"]) == []


def test_plain_v1_still_routes_by_session_key(gateway):
    server, store = gateway
    session = open_session(server)
    for headers in (bearer(session["key"]), {"x-api-key": session["key"]}):
        resp = httpx.post(f"{server.url}/v1/chat/completions", json=CHAT, headers=headers, timeout=30)
        assert resp.status_code == 200, resp.text
    assert len(stored_calls(store, session["session_id"])) == 2


def control_requests(server, sid: str, call_id: str) -> list[tuple[str, str, dict | None]]:
    return [
        ("POST", "/sessions", {"group_id": "intruder"}),
        ("GET", "/sessions", None),
        ("GET", f"/sessions/{sid}?tokens=1", None),
        ("POST", f"/sessions/{sid}/reward", {"reward": 99.0}),
        ("POST", f"/sessions/{sid}/advantages", {"advantages": [{"call_id": call_id, "advantage": 5.0}]}),
        ("POST", f"/sessions/{sid}/finish", {"info": {"status": "ok"}}),
        ("POST", "/admin/pause", {"drain_timeout_s": 0}),
        ("POST", "/admin/resume", None),
    ]


def test_the_control_plane_takes_only_the_admin_key(gateway):
    server, store = gateway
    session = open_session(server, group_id="guarded")
    sid = session["session_id"]
    reply = httpx.post(f"{session['base_url']}/chat/completions", json=CHAT, headers=bearer(session["key"]), timeout=30)
    call_id = reply.json()["id"].removeprefix("chatcmpl-")
    # The harness holds its session's key: with it, it must not score or end its own episode.
    refused = [{}, bearer("rak-not-the-key"), bearer(session["key"]), {"x-api-key": session["key"]}]
    for method, path, body in control_requests(server, sid, call_id):
        for headers in refused:
            assert_401(httpx.request(method, f"{server.url}{path}", json=body, headers=headers, timeout=30))
    with TrajectoryReader(store) as reader:
        assert reader.session(sid).status == "open" and reader.rewards(sid) == []
        assert [s.group_id for s in reader.sessions(group_id="intruder")] == []
        assert reader.advantages(sid) == {}
    assert httpx.get(f"{server.url}/health").json()["paused"] is False

    for method, path, body in control_requests(server, sid, call_id):
        for headers in (bearer(server.admin_key), {"x-api-key": server.admin_key}):
            if path.endswith("/finish") and headers.get("x-api-key"):
                continue  # finished once is enough
            resp = httpx.request(method, f"{server.url}{path}", json=body, headers=headers, timeout=30)
            assert resp.status_code in (200, 201), f"{method} {path}: {resp.text}"
    with TrajectoryReader(store) as reader:
        assert reader.session(sid).status == "finished" and [r.reward for r in reader.rewards(sid)] == [99.0, 99.0]


def test_health_and_metrics_are_open(gateway):
    server, _ = gateway
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"
    assert httpx.get(f"{server.url}/metrics").status_code == 200


@pytest.mark.parametrize("sid", [".", "..", "a/b", "%2e%2e", "..%2f", "a b", "x\n", "-lead", "a.b", "é", "a" * 129])
def test_session_ids_are_plain_tokens(gateway, sid):
    server, store = gateway
    resp = httpx.post(f"{server.url}/sessions", json={"session_id": sid}, headers=bearer(server.admin_key))
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == "session_id"
    with TrajectoryReader(store) as reader:
        assert reader.session(sid) is None


def test_a_plain_token_session_id_is_taken(gateway):
    server, _ = gateway
    session = open_session(server, session_id="Run_7-task-3")
    assert session["base_url"] == f"{server.url}/sessions/Run_7-task-3/v1"


def roost_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("ROOST_ADMIN_KEY", "ROOST_ENGINE_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "roost.cli.main", *args],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7", "gateway.example"])
def test_the_gateway_binds_beyond_loopback_only_with_an_admin_key(host, tmp_path):
    # Without --engine-url it would start an engine first: the refusal comes before that.
    done = roost_cli("gateway", "--host", host, "--port", "0", "--store", str(tmp_path / "t.sqlite"))
    assert done.returncode == 2
    assert "beyond loopback" in done.stderr and "--admin-key" in done.stderr and "ROOST_ADMIN_KEY" in done.stderr
    assert not (tmp_path / "t.sqlite").exists()


def test_a_gateway_started_without_a_key_prints_the_one_it_made(scripted_engine_url, tmp_path):
    port_file = tmp_path / "port"
    clean = {k: v for k, v in os.environ.items() if k not in ("ROOST_ADMIN_KEY", "ROOST_ENGINE_KEY")}
    process, port = start_reporting(
        [
            sys.executable,
            "-m",
            "roost.cli.main",
            "gateway",
            "--engine-url",
            scripted_engine_url,
            "--model",
            "tiny",
            "--port",
            "0",
            "--port-file",
            str(port_file),
            "--store",
            str(tmp_path / "t.sqlite"),
        ],
        port_file,
        "gateway",
        120,
        env=clean,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        printed = next((line for line in process.stderr if "admin key" in line), "")
        found = re.search(r"admin key (rak-\S+)", printed)
        assert found and "ROOST_ADMIN_KEY" in printed, printed
        assert httpx.post(f"{url}/sessions", json={}).status_code == 401
        assert httpx.post(f"{url}/sessions", json={}, headers=bearer(found[1])).status_code == 201
    finally:
        stop_process(process)
