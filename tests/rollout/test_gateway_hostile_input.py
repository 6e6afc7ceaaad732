"""Numbers the store cannot hold and tool calls nested too deep: each a precise 400 naming the field
(or, in a model's reply, text that is not taken for a call), nothing stored, the gateway serving on."""

from __future__ import annotations

import httpx
import pytest

from roost.rollout.keys import bearer
from roost.tests.rollout.gateway_helpers import new_session, say, start_gateway

BIG = 2**70
HI = [{"role": "user", "content": "hi"}]
DEEP = "[" * 300 + "]" * 300  # past the 254 levels orjson writes (the store, the prefix keys)


@pytest.fixture(scope="module")
def gateway(scripted_engine_url, tmp_path_factory):
    server = start_gateway(scripted_engine_url, tmp_path_factory.mktemp("store") / "trajectories.sqlite")
    yield server
    server.stop()


def post(server, path: str, content: str) -> httpx.Response:
    """A control-plane POST with the admin key."""
    return httpx.post(
        f"{server.url}{path}",
        content=content,
        timeout=60,
        headers={"content-type": "application/json", **bearer(server.admin_key)},
    )


def read(server, path: str) -> dict:
    return httpx.get(f"{server.url}{path}", headers=bearer(server.admin_key)).json()


def chat(session: dict, body: dict) -> httpx.Response:
    return httpx.post(
        f"{session['base_url']}/chat/completions",
        json={"model": "tiny", "max_tokens": 8, **body},
        headers={"Authorization": f"Bearer {session['key']}"},
        timeout=60,
    )


def assert_400(resp: httpx.Response, param: str, needle: str) -> None:
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_request", param), error
    assert needle in error["message"], error["message"]


BAD_SESSIONS = [
    ('{"task": {"id": "t", "seed": %d}}' % BIG, "task.seed", "past the signed 64-bit range"),
    ('{"metadata": {"n": %d}}' % -(2**63 + 1), "metadata.n", "past the signed 64-bit range"),
    ('{"task": {"x": [1, 1e400]}}', "task.x.1", "inf is not a finite number"),
]


@pytest.mark.parametrize("body,param,needle", BAD_SESSIONS, ids=[b[1] for b in BAD_SESSIONS])
def test_a_session_with_numbers_past_the_store_is_refused(gateway, body, param, needle):
    before = read(gateway, "/sessions")["sessions"]
    assert_400(post(gateway, "/sessions", body), param, needle)
    assert read(gateway, "/sessions")["sessions"] == before


def test_rewards_advantages_and_finish_info_must_be_finite_and_fit_64_bits(gateway):
    session = new_session(gateway)
    sid = session["session_id"]
    reply = chat(session, {"messages": HI, **say("Hello.")})
    call_id = reply.headers["X-Roost-Call-Id"]
    for body, param, needle in [
        ('{"reward": NaN}', "reward", "nan is not a finite number"),
        ('{"reward": 1e400}', "reward", "inf is not a finite number"),
        ('{"reward": -Infinity}', "reward", "-inf is not a finite number"),
        ('{"reward": 1, "info": {"steps": %d}}' % BIG, "info.steps", "64-bit"),
        ('{"reward": 1, "info": {"x": NaN}}', "info.x", "not a finite number"),
    ]:
        assert_400(post(gateway, f"/sessions/{sid}/reward", body), param, needle)
    for advantage, param in [("NaN", "advantages.0.advantage"), ("[Infinity]", "advantages.0.advantage.0")]:
        body = '{"advantages": [{"call_id": "%s", "advantage": %s}]}' % (call_id, advantage)
        assert_400(post(gateway, f"/sessions/{sid}/advantages", body), param, "not a finite number")
    assert_400(post(gateway, f"/sessions/{sid}/finish", '{"info": {"n": %d}}' % BIG), "info.n", "64-bit")
    stored = read(gateway, f"/sessions/{sid}")
    assert (stored["rewards"], stored["status"]) == ([], "open")
    assert post(gateway, f"/sessions/{sid}/reward", '{"reward": 0.5}').status_code == 200
    assert read(gateway, f"/sessions/{sid}")["rewards"][0]["reward"] == 0.5


def test_a_seed_or_token_id_past_64_bits_is_refused(gateway):
    session = new_session(gateway)
    assert_400(chat(session, {"messages": HI, "seed": BIG}), "seed", "past the signed 64-bit range")
    assert_400(chat(session, {"messages": HI, "stop_token_ids": [1, BIG]}), "stop_token_ids.1", "64-bit")
    call = {"id": "c1", "type": "function", "function": {"name": "act", "arguments": {"n": BIG}}}
    echoed = HI + [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    assert_400(chat(session, {"messages": echoed}), "messages.1.tool_calls.0.function.arguments.n", "64-bit")
    assert chat(session, {"messages": HI, "seed": 2**63 - 1, **say("Fine.")}).status_code == 200


def test_a_tool_call_nested_past_the_limit_is_not_taken_for_a_call(gateway):
    session = new_session(gateway)
    deep_call = '<tool_call>\n{"name": "act", "arguments": {"command": %s}}\n</tool_call>' % DEEP
    reply = chat(session, {"messages": HI, "max_tokens": 1000, **say(deep_call)})
    assert reply.status_code == 200, reply.text
    message = reply.json()["choices"][0]["message"]
    assert not message.get("tool_calls") and message["content"] == deep_call  # the model's text, as it said it
    # a harness that echoes such a call back as JSON text still gets an answer
    call = {"id": "c1", "type": "function", "function": {"name": "act", "arguments": '{"command": %s}' % DEEP}}
    echoed = HI + [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    assert chat(session, {"messages": echoed, **say("Done.")}).status_code == 200
