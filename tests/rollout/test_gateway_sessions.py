"""Sessions and agents: two agents recorded apart with their parent link, edited history
recorded as a fork, the reasoning policies, the control plane, pause/resume, metrics."""

from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest

from roost.rollout.keys import bearer
from roost.rollout.store.paths import iter_training_samples
from roost.tests.prometheus_samples import sample
from roost.tests.rollout.gateway_helpers import (
    THINK,
    TOOL_CALL,
    WEATHER_TOOLS,
    EngineSpy,
    assert_token_exact,
    misbehave,
    new_session,
    say,
    start_gateway,
    stored_calls,
)


@pytest.fixture(scope="module")
def spy(scripted_engine_url):
    with EngineSpy(scripted_engine_url) as spy:
        yield spy


@pytest.fixture(scope="module")
def gateway(spy, tmp_path_factory):
    store = tmp_path_factory.mktemp("store") / "trajectories.sqlite"
    server = start_gateway(spy.url, store, pause_wait_s=1.0)
    yield server, store
    server.stop()


def chat(base_url, key, messages, reply, headers=None, **kwargs):
    client = openai.OpenAI(base_url=base_url, api_key=key, default_headers=headers or {}, max_retries=0)
    return client.chat.completions.create(model="tiny", messages=messages, extra_body=say(reply), **kwargs)


def test_two_agents_recorded_apart_with_parent_link(gateway, spy):
    server, store = gateway
    url, admin = server.url, bearer(server.admin_key)
    session = new_session(server, group_id="g-agents")
    sid = session["session_id"]
    planner = f"{url}/sessions/{sid}/agents/planner/v1"
    convo = [{"role": "user", "content": "Plan a trip."}]
    first = chat(planner, session["key"], convo, "1. Book flights.").choices[0].message
    # The worker is addressed by header on the session URL, naming its parent.
    worker_msgs = [{"role": "user", "content": "Book flights."}]
    chat(
        session["base_url"],
        session["key"],
        worker_msgs,
        "Booked.",
        headers={"X-Roost-Agent": "worker", "X-Roost-Parent-Agent": "planner"},
    )
    convo += [first.model_dump(exclude_none=True), {"role": "user", "content": "Done?"}]
    chat(planner, session["key"], convo, "Yes.")
    calls = stored_calls(store, sid)
    by_agent = {}
    for c in calls:
        by_agent.setdefault(c.agent_id, []).append(c)
    assert sorted(by_agent) == ["planner", "worker"]
    assert [c.kind for c in by_agent["planner"]] == ["root", "extend"]
    assert [c.kind for c in by_agent["worker"]] == ["root"]
    assert by_agent["worker"][0].parent_agent == "planner" and by_agent["planner"][0].parent_agent is None
    view = httpx.get(f"{url}/sessions/{sid}", headers=admin).json()
    assert {a["agent_id"]: a["parent_agent"] for a in view["agents"]} == {"planner": None, "worker": "planner"}
    httpx.post(f"{url}/sessions/{sid}/finish", headers=admin).raise_for_status()
    samples = list(iter_training_samples(store, session_ids=[sid]))
    assert sorted(s.agent_id for s in samples) == ["planner", "worker"]
    assert_token_exact(store, sid, spy)


def test_edited_history_is_recorded_as_fork(gateway, spy):
    server, store = gateway
    url, admin = server.url, bearer(server.admin_key)
    session = new_session(server)
    base = session["base_url"]
    convo = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a color."}]
    a1 = chat(base, session["key"], convo, "Blue.").choices[0].message.model_dump(exclude_none=True)
    convo2 = convo + [a1, {"role": "user", "content": "Another."}]
    chat(base, session["key"], convo2, "Red.")
    # The harness rewrites the first reply (a summary, an edit): not a continuation.
    edited = convo + [{"role": "assistant", "content": "Green."}, {"role": "user", "content": "Another."}]
    chat(base, session["key"], edited, "Yellow.")
    calls = stored_calls(store, session["session_id"])
    assert [c.kind for c in calls] == ["root", "extend", "fork"]
    fork = calls[2]
    parent = next(c for c in calls if c.call_id == fork.parent_call_id)
    path = list(parent.prompt_ids) + list(parent.sampled_ids)
    assert 0 < fork.shared_prefix_len < len(path)
    assert list(fork.prompt_ids[: fork.shared_prefix_len]) == path[: fork.shared_prefix_len]
    assert fork.prompt_ids[fork.shared_prefix_len] != path[fork.shared_prefix_len]
    httpx.post(f"{url}/sessions/{session['session_id']}/finish", headers=admin).raise_for_status()
    samples = {s.leaf_call_id: s for s in iter_training_samples(store, session_ids=[session["session_id"]])}
    assert sorted(samples) == sorted([calls[1].call_id, fork.call_id])  # the extended path and the fork

    def masked(sample):
        return [t for t, m in zip(sample.tokens, sample.loss_mask) if m]

    assert masked(samples[calls[1].call_id]) == list(calls[0].sampled_ids) + list(calls[1].sampled_ids)
    kept = max(0, fork.shared_prefix_len - len(parent.prompt_ids))  # parent tokens the fork still holds
    assert masked(samples[fork.call_id]) == list(parent.sampled_ids[:kept]) + list(fork.sampled_ids)
    assert_token_exact(store, session["session_id"], spy)


@pytest.mark.parametrize("policy", ["keep", "drop"])
def test_reasoning_policies(gateway, spy, policy):
    server, store = gateway
    session = new_session(server, reasoning_policy=policy)
    base = session["base_url"]
    convo = [{"role": "user", "content": "What is 2+2?"}]
    a1 = chat(base, session["key"], convo, "<think>\nsimple sum\n</think>\n\n4.").choices[0].message
    assert a1.content == "4." and a1.model_extra["reasoning_content"] == "simple sum"
    convo += [a1.model_dump(exclude_none=True), {"role": "user", "content": "And 3+3?"}]
    chat(base, session["key"], convo, "6.")
    first, second = stored_calls(store, session["session_id"])
    path = list(first.prompt_ids) + list(first.sampled_ids)
    if policy == "keep":
        # The engine sees its own past reasoning: one growing sample.
        assert (second.kind, second.reuse) == ("extend", "kept")
        assert list(second.prompt_ids[: len(path)]) == path
    else:
        # Qwen3's template drops the past <think> block: a fork sharing the prompt.
        assert second.kind == "fork" and second.parent_call_id == first.call_id
        assert len(first.prompt_ids) <= second.shared_prefix_len < len(path)
    assert_token_exact(store, session["session_id"], spy)


def test_control_plane_rewards_advantages_finish(gateway):
    server, store = gateway
    url, admin = server.url, bearer(server.admin_key)
    session = new_session(server, group_id="g-control", task={"id": "t-7", "split": "train"})
    sid = session["session_id"]
    reply = chat(session["base_url"], session["key"], [{"role": "user", "content": "hi"}], "Hello.")
    call_id = reply.id.removeprefix("chatcmpl-")
    n_sampled = reply.usage.completion_tokens
    assert httpx.post(f"{url}/sessions/{sid}/reward", json={"reward": 0.5}, headers=admin).status_code == 200
    assert (
        httpx.post(f"{url}/sessions/{sid}/reward", json={"reward": 1.0, "call_id": call_id}, headers=admin).status_code
        == 200
    )
    bad = httpx.post(f"{url}/sessions/{sid}/reward", json={"reward": 1.0, "agent": "ghost"}, headers=admin)
    assert bad.status_code == 404 and "ghost" in bad.json()["error"]["message"]
    short = httpx.post(
        f"{url}/sessions/{sid}/advantages",
        json={"advantages": [{"call_id": call_id, "advantage": [1.0]}]},
        headers=admin,
    )
    assert short.status_code == 400 and "per-token" in short.json()["error"]["message"]
    ok = httpx.post(
        f"{url}/sessions/{sid}/advantages",
        json={"advantages": [{"call_id": call_id, "advantage": [0.25] * n_sampled}]},
        headers=admin,
    )
    assert ok.status_code == 200
    listed = httpx.get(f"{url}/sessions", params={"group": "g-control"}, headers=admin).json()["sessions"]
    assert [s["session_id"] for s in listed] == [sid] and listed[0]["calls"] == 1
    finished = httpx.post(f"{url}/sessions/{sid}/finish", json={"info": {"outcome": "solved"}}, headers=admin)
    assert finished.json()["status"] == "finished"
    late = httpx.post(
        f"{session['base_url']}/chat/completions",
        headers=bearer(session["key"]),
        json={"model": "tiny", "messages": [{"role": "user", "content": "again"}]},
    )
    assert late.status_code == 409 and late.json()["error"]["code"] == "session_finished"
    [sample] = list(iter_training_samples(store, group_ids=["g-control"]))
    assert sample.reward == 0.5 and sample.calls[-1].reward == 1.0  # the session's outcome; the call's step reward
    assert sample.task == {"id": "t-7", "split": "train"}
    assert sample.num_sampled == n_sampled
    assert sample.advantages[-n_sampled:] == [0.25] * n_sampled
    view = httpx.get(f"{url}/sessions/{sid}", params={"tokens": 1}, headers=admin).json()
    assert view["status"] == "finished" and len(view["calls"][0]["sampled_ids"]) == n_sampled


def test_a_sessions_time_splits_into_prefill_decode_and_tools(gateway):
    server, _ = gateway
    session = new_session(server)
    convo = [{"role": "user", "content": "hi"}]
    chat(session["base_url"], session["key"], convo, "Hello there.")
    time.sleep(0.3)  # the harness runs a tool
    stream = chat(session["base_url"], session["key"], convo, "A longer answer, streamed.", stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "A longer answer, streamed."
    view = httpx.get(f"{server.url}/sessions/{session['session_id']}", headers=bearer(server.admin_key)).json()
    plain, streamed = (c["timings"] for c in view["calls"])
    for t in (plain, streamed):  # the engine's time to first token; the stream's first chunk
        assert t["held_ms"] == 0.0 and t["paused_ms"] < 50
        assert 0 < t["prefill_ms"] < t["engine_ms"] and t["decode_ms"] > 0
        assert t["prefill_ms"] + t["decode_ms"] == pytest.approx(t["engine_ms"])
    program = view["program"]
    assert program["calls"] == program["split_calls"] == 2
    assert 300 <= program["tool_ms"] < 5000
    assert program["wall_ms"] == pytest.approx(program["tool_ms"] + plain["total_ms"] + streamed["total_ms"], abs=1)
    assert program["prefill_ms"] == pytest.approx(plain["prefill_ms"] + streamed["prefill_ms"])
    assert program["engine_ms"] == pytest.approx(plain["engine_ms"] + streamed["engine_ms"])


def test_pause_waits_bounded_and_resume_lets_calls_through(gateway):
    server, store = gateway
    url, admin = server.url, bearer(server.admin_key)
    session = new_session(server)
    assert httpx.post(f"{url}/admin/pause", headers=admin).json()["drained"] is True
    started = time.monotonic()
    waited = httpx.post(
        f"{session['base_url']}/chat/completions",
        headers=bearer(session["key"]),
        json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert waited.status_code == 503 and waited.headers["Retry-After"]
    assert 0.9 < time.monotonic() - started < 10  # pause_wait_s=1
    result = {}

    def call():
        result["reply"] = chat(session["base_url"], session["key"], [{"role": "user", "content": "hi"}], "Back.")

    thread = threading.Thread(target=call)
    thread.start()
    time.sleep(0.3)
    assert "reply" not in result  # still waiting at the gate
    httpx.post(f"{url}/admin/resume", headers=admin).raise_for_status()
    thread.join(10)
    assert result["reply"].choices[0].message.content == "Back."
    [back] = stored_calls(store, session["session_id"])  # the refused call is not recorded
    assert 250 <= back.timings["paused_ms"] <= back.timings["prepare_ms"] and back.timings["held_ms"] == 0


def test_pause_lets_calls_in_flight_finish(gateway):
    server, store = gateway
    url, admin = server.url, bearer(server.admin_key)
    session = new_session(server)
    result = {}

    def slow_call():
        result["resp"] = httpx.post(
            f"{session['base_url']}/chat/completions",
            timeout=30,
            headers=bearer(session["key"]),
            json={
                "model": "tiny",
                "messages": [{"role": "user", "content": "hi"}],
                **misbehave("slow:1.0", "Finished."),
            },
        )

    thread = threading.Thread(target=slow_call)
    thread.start()
    time.sleep(0.3)
    paused = httpx.post(f"{url}/admin/pause", json={"drain_timeout_s": 10}, timeout=30, headers=admin).json()
    thread.join(10)
    httpx.post(f"{url}/admin/resume", headers=admin).raise_for_status()
    assert paused == {"paused": True, "drained": True, "in_flight": 0}
    assert result["resp"].status_code == 200
    assert result["resp"].json()["choices"][0]["message"]["content"] == "Finished."
    assert len(stored_calls(store, session["session_id"])) == 1


def test_health_and_metrics(gateway):
    url = gateway[0].url
    health = httpx.get(f"{url}/health").json()
    assert health["status"] == "ok" and health["engine"] == "ok" and health["model"] == "tiny"
    text = httpx.get(f"{url}/metrics").text
    assert sample(text, "roost_gateway_calls_total", endpoint="chat", kind="root", reuse="none") >= 1
    assert sample(text, "roost_gateway_request_seconds_count", endpoint="chat") >= 1
    assert sample(text, "roost_gateway_in_flight") == 0
    models = openai.OpenAI(base_url=f"{url}/v1", api_key="x").models.list()
    assert [m.id for m in models.data] == ["tiny"]


def test_tool_parse_failure_is_counted_and_returned_as_content(gateway):
    server, _ = gateway
    session = new_session(server)
    broken = "<tool_call>\n{not json}\n</tool_call>"
    reply = chat(
        session["base_url"], session["key"], [{"role": "user", "content": "weather?"}], broken, tools=WEATHER_TOOLS
    )
    message = reply.choices[0].message
    assert message.tool_calls is None and message.content == broken
    assert reply.choices[0].finish_reason == "stop"
    assert sample(httpx.get(f"{server.url}/metrics").text, "roost_gateway_tool_parse_failures_total") == 1
    ok = chat(
        session["base_url"],
        session["key"],
        [{"role": "user", "content": "weather?"}],
        THINK + TOOL_CALL,
        tools=WEATHER_TOOLS,
        tool_choice="none",
    )
    assert ok.choices[0].message.tool_calls is None and "<tool_call>" in ok.choices[0].message.content
