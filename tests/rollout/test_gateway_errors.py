"""Bad input and failing engines: each an OpenAI-shaped error with the right status; the
gateway keeps serving other sessions; no stored call is lost or corrupted."""

from __future__ import annotations

import sqlite3
import threading
import time

import httpx
import pytest

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.keys import bearer
from roost.serving.listen import bind_listener, bound_port
from roost.tests.rollout.gateway_helpers import (
    EngineSpy,
    assert_token_exact,
    misbehave,
    new_session,
    say,
    start_gateway,
    stored_calls,
)

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def spy(scripted_engine_url):
    with EngineSpy(scripted_engine_url) as spy:
        yield spy


@pytest.fixture(scope="module")
def gateway(spy, tmp_path_factory):
    store = tmp_path_factory.mktemp("store") / "trajectories.sqlite"
    server = start_gateway(spy.url, store, engine_timeout_s=1.5, retry_after_s=3)
    yield server, store
    server.stop()


def post(url, path, body=None, content=None, headers=None):
    return httpx.post(f"{url}{path}", json=body, content=content, headers=headers, timeout=30)


def assert_error(resp, status, code=None, needle=None):
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert set(error) >= {"message", "type", "code"}
    if code is not None:
        assert error["code"] == code, error
    if needle is not None:
        assert needle in error["message"], error["message"]
    return error


BAD_REQUESTS = [
    (b"{not json", 400, "invalid_json", "malformed JSON"),
    (b"", 400, "invalid_json", "empty"),
    (b"[1, 2]", 400, None, "JSON object"),
    (b'{"model": "tiny"}', 400, None, "messages is required"),
    (b'{"model": "tiny", "messages": []}', 400, None, "messages is empty"),
    (b'{"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]}', 400, None, "messages.0.role"),
    (b'{"model": "tiny", "messages": [{"role": "user"}]}', 400, None, "has no content"),
    (b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "temprature": 1}', 400, None, "temprature"),
    (b'{"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}', 404, "model_not_found", "'tiny'"),
    (
        b'{"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}',
        400,
        None,
        "without a URL",
    ),
    (
        b'{"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": '
        b'{"url": "data:image/png;base64,iVBORw0KGgo="}}]}]}',
        400,
        "image_not_supported",
        "reads text only",
    ),
    (
        b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 100000}',
        400,
        "context_length_exceeded",
        "max_tokens",
    ),
]


@pytest.mark.parametrize("body,status,code,needle", BAD_REQUESTS, ids=[c[3] for c in BAD_REQUESTS])
def test_bad_request(gateway, body, status, code, needle):
    server, _ = gateway
    url, session = server.url, new_session(server)
    resp = post(
        url,
        f"/sessions/{session['session_id']}/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json", **bearer(session["key"])},
    )
    assert_error(resp, status, code, needle)
    # The same session still works.
    ok = post(
        url,
        f"/sessions/{session['session_id']}/v1/chat/completions",
        {"model": "tiny", "messages": HI, **say("fine")},
        headers=bearer(session["key"]),
    )
    assert ok.status_code == 200


def test_prompt_past_context_length(gateway):
    url = gateway[0].url
    long = " ".join(["word"] * 5000)
    resp = post(url, "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": long}]})
    assert_error(resp, 400, "context_length_exceeded", "context length is 4096")


def test_unknown_session_and_wrong_keys(gateway):
    server, _ = gateway
    url, admin = server.url, bearer(server.admin_key)
    assert_error(
        post(
            url, "/sessions/nope/v1/chat/completions", {"model": "tiny", "messages": HI}, headers=bearer("rsk-some-key")
        ),
        404,
        "session_not_found",
        "POST /sessions",
    )
    one, two = new_session(server), new_session(server)
    wrong = post(
        url,
        "/v1/chat/completions",
        {"model": "tiny", "messages": HI},
        headers={"Authorization": "Bearer rsk-not-a-key"},
    )
    assert_error(wrong, 401, "invalid_api_key")
    crossed = post(
        url,
        f"/sessions/{one['session_id']}/v1/chat/completions",
        {"model": "tiny", "messages": HI},
        headers={"Authorization": f"Bearer {two['key']}"},
    )
    assert_error(crossed, 401, "invalid_api_key", one["session_id"])
    assert_error(httpx.get(f"{url}/sessions/nope", headers=admin), 404, "session_not_found")
    assert_error(httpx.get(f"{url}/v2/whatever"), 404, "not_found", "/v1/chat/completions")
    assert_error(httpx.get(f"{url}/v1/chat/completions"), 405)
    assert_error(post(url, "/sessions", {"group_id": "g", "colour": "red"}, headers=admin), 400, None, "colour")


def test_agent_ids_are_plain_tokens(gateway):
    server, _ = gateway
    session = new_session(server)
    for agent in ("a b", "a?b", "x" * 129):
        answer = post(
            server.url,
            "/v1/chat/completions",
            {"model": "tiny", "messages": HI},
            headers={**bearer(session["key"]), "X-Roost-Agent": agent},
        )
        assert_error(answer, 400, None, "X-Roost-Agent")
    answer = post(
        server.url,
        f"/sessions/{session['session_id']}/agents/a%0A/v1/chat/completions",
        {"model": "tiny", "messages": HI},
        headers=bearer(session["key"]),
    )
    assert_error(answer, 400, None, "path")


@pytest.mark.parametrize(
    "mode,code",
    [
        ("error500", "engine_unavailable"),
        ("garbage", "engine_protocol_error"),
        ("wrong_shape", "engine_protocol_error"),
        ("slow:5", "engine_unavailable"),
    ],
)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_engine_failure_is_503_and_session_kept(gateway, spy, mode, code, stream):
    server, store = gateway
    url, session = server.url, new_session(server)
    key = bearer(session["key"])
    base = f"{url}/sessions/{session['session_id']}/v1/chat/completions"
    first = post(
        url,
        f"/sessions/{session['session_id']}/v1/chat/completions",
        {"model": "tiny", "messages": HI, **say("Hello.")},
        headers=key,
    ).json()
    convo = HI + [first["choices"][0]["message"], {"role": "user", "content": "more"}]
    started = time.monotonic()
    failed = httpx.post(
        base, json={"model": "tiny", "messages": convo, "stream": stream, **misbehave(mode)}, headers=key, timeout=30
    )
    assert_error(failed, 503, code)
    assert failed.headers["Retry-After"] == "3"
    assert time.monotonic() - started < 5  # engine_timeout_s=1.5 bounds a slow engine
    again = httpx.post(base, json={"model": "tiny", "messages": convo, **say("More.")}, headers=key, timeout=30)
    assert again.status_code == 200
    calls = stored_calls(store, session["session_id"])
    assert [c.kind for c in calls] == ["root", "extend"]  # the failure left the tree intact
    assert_token_exact(store, session["session_id"], spy)


def test_slow_engine_does_not_block_other_sessions(gateway):
    server, _ = gateway
    url, slow, fast = server.url, new_session(server), new_session(server)
    results = {}

    def slow_call():
        results["slow"] = post(
            url,
            f"/sessions/{slow['session_id']}/v1/chat/completions",
            {"model": "tiny", "messages": HI, **misbehave("slow:5")},
            headers=bearer(slow["key"]),
        )

    thread = threading.Thread(target=slow_call)
    thread.start()
    time.sleep(0.2)
    started = time.monotonic()
    ok = post(
        url,
        f"/sessions/{fast['session_id']}/v1/chat/completions",
        {"model": "tiny", "messages": HI, **say("Hi")},
        headers=bearer(fast["key"]),
    )
    assert ok.status_code == 200 and time.monotonic() - started < 1.5
    thread.join(10)
    assert results["slow"].status_code == 503


def test_engine_down(tmp_path):
    refusing = bind_listener()  # bound, never listening: every connection is refused
    server = start_gateway(f"http://127.0.0.1:{bound_port(refusing)}", tmp_path / "t.sqlite", retry_after_s=7)
    try:
        session = new_session(server)
        for stream in (False, True):
            resp = post(
                server.url,
                f"/sessions/{session['session_id']}/v1/chat/completions",
                {"model": "tiny", "messages": HI, "stream": stream},
                headers=bearer(session["key"]),
            )
            assert_error(resp, 503, "engine_unavailable", "session is kept")
            assert resp.headers["Retry-After"] == "7"
        assert httpx.get(f"{server.url}/health").json()["engine"] == "unreachable"
        view = httpx.get(f"{server.url}/sessions/{session['session_id']}", headers=bearer(server.admin_key))
        assert view.json()["status"] == "open"
    finally:
        server.stop()
        refusing.close()


def test_health_is_503_while_the_engine_is_unreachable(tmp_path):
    held = bind_listener()  # the engine's port, refusing connections until the engine binds it
    port = bound_port(held)
    server = start_gateway(f"http://127.0.0.1:{port}", tmp_path / "t.sqlite")  # comes up before its engine
    try:
        down = httpx.get(f"{server.url}/health")
        assert down.status_code == 503, down.text
        assert down.json()["status"] == "degraded" and down.json()["engine"] == "unreachable"
        held.close()  # handed over: the engine binds it at once (SO_REUSEADDR)
        with EngineProcess(scripted=True, port=port):
            up = httpx.get(f"{server.url}/health")
            assert up.status_code == 200 and up.json()["status"] == "ok" and up.json()["engine"] == "ok"
        assert httpx.get(f"{server.url}/health").status_code == 503  # the engine stopped again
    finally:
        server.stop()


def test_store_is_intact(gateway, spy):
    _, store = gateway
    with sqlite3.connect(store) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        sids = [r[0] for r in conn.execute("SELECT DISTINCT session_id FROM calls")]
    for sid in sids:
        assert_token_exact(store, sid, spy)
