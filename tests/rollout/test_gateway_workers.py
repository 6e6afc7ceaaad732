"""`roost gateway --workers 2`: two gateway processes behind one port, one store. Each session
lives on one worker (by its id), calls by URL and by key reach it, control writes reach both,
and a worker killed under load costs only its own sessions a 503 with Retry-After: it is started
again, takes the pause the others hold, and its sessions go on from the store."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import anthropic
import httpx
import openai
import orjson
import psutil
import pytest

from roost.rollout.gateway.control.client import GatewayClient
from roost.rollout.gateway.launch import GatewayProcess
from roost.rollout.gateway.workers.routing import destination, with_session_id, worker_of
from roost.rollout.keys import bearer
from roost.tests.child_processes import assert_gone
from roost.tests.prometheus_samples import sample
from roost.tests.rollout.gateway_helpers import EngineSpy, assert_token_exact, say, stored_calls

WORKERS = 2


@pytest.fixture(scope="module")
def spy(scripted_engine_url):
    with EngineSpy(scripted_engine_url) as spy:
        yield spy


@pytest.fixture(scope="module")
def relay(spy, tmp_path_factory):
    store = tmp_path_factory.mktemp("workers") / "trajectories.sqlite"
    args = ["--engine-url", spy.url, "--model", "tiny", "--store", str(store), "--workers", str(WORKERS)]
    args += ["--pause-wait-s", "1"]
    gateway = GatewayProcess(args)
    url = gateway.start()
    try:
        yield url, gateway.admin_key, store
    finally:
        gateway.stop()


def _session(url: str, admin_key: str, **body) -> dict:
    answer = httpx.post(f"{url}/sessions", json=body, headers=bearer(admin_key), timeout=30)
    assert answer.status_code == 201, answer.text
    return answer.json()


def _health(url: str) -> dict:
    return httpx.get(f"{url}/health", timeout=10).json()


def _sessions_on_each_worker(url: str, admin_key: str, group: str) -> dict[int, dict]:
    """One new session on each worker (ids are drawn by the relay until both are covered)."""
    found: dict[int, dict] = {}
    for _ in range(64):
        session = _session(url, admin_key, group_id=group)
        found.setdefault(worker_of(session["session_id"], WORKERS), session)
        if len(found) == WORKERS:
            return found
    raise AssertionError(f"64 sessions all landed on workers {sorted(found)}")


def test_where_requests_go():
    assert destination("POST", "/admin/pause", None).kind == "broadcast"
    assert destination("DELETE", "/admin/engines/e1", None).kind == "broadcast"
    assert destination("GET", "/admin/engines", None).kind == "first"
    assert destination("GET", "/metrics", None).kind == "merged"
    assert destination("POST", "/sessions", None).kind == "create"
    assert destination("GET", "/samples", None).kind == "any"
    where = destination("POST", "/sessions/abc/agents/planner/v1/chat/completions", "rsk-x")
    assert (where.kind, where.session_id) == ("session", "abc")
    assert destination("POST", "/v1/messages", "rsk-secret").kind == "key"
    assert destination("POST", "/v1/chat/completions", None).kind == "first"  # the anonymous session
    assert worker_of("anon-123", 8) == 0
    assert {worker_of(f"s{i}", 2) for i in range(20)} == {0, 1}
    body, sid = with_session_id(b'{"group_id": "g"}')
    assert sid and b'"group_id":"g"' in body and sid.encode() in body
    assert with_session_id(b'{"session_id": "mine"}') == (b'{"session_id": "mine"}', "mine")
    assert with_session_id(b"[1]") == (b"[1]", None)  # a worker answers its 400


def test_sessions_on_both_workers_record_into_one_store(relay, spy):
    url, admin_key, store = relay
    health = _health(url)
    assert health["status"] == "ok" and [w["status"] for w in health["workers"]] == ["ok", "ok"]
    sessions = _sessions_on_each_worker(url, admin_key, "both")
    for index, session in sessions.items():
        assert session["base_url"].startswith(url), "base_url names the relay's port, not the worker's"
        by_url = openai.OpenAI(base_url=session["base_url"], api_key=session["key"], max_retries=0)
        reply = by_url.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Hi."}], extra_body=say(f"Worker {index}.")
        )
        assert reply.choices[0].message.content == f"Worker {index}."
        # The same session by its key alone, on plain /v1, and on another wire.
        by_key = anthropic.Anthropic(base_url=url, api_key=session["key"], max_retries=0)
        message = by_key.messages.create(
            model="tiny",
            max_tokens=32,
            messages=[
                {"role": "user", "content": "Hi."},
                {"role": "assistant", "content": f"Worker {index}."},
                {"role": "user", "content": "Again."},
            ],
            extra_body=say("Again."),
        )
        assert message.content[0].text == "Again."
        by_url.chat.completions.create(  # by URL again: its worker knows the call made by key
            model="tiny",
            messages=[
                {"role": "user", "content": "Hi."},
                {"role": "assistant", "content": f"Worker {index}."},
                {"role": "user", "content": "Again."},
                {"role": "assistant", "content": "Again."},
                {"role": "user", "content": "Once more."},
            ],
            extra_body=say("Done."),
        )
    for session in sessions.values():
        calls = stored_calls(store, session["session_id"])
        assert [c.endpoint for c in calls] == ["chat", "messages", "chat"]
        assert [c.reuse for c in calls] == ["none", "exact", "exact"]
        assert [c.parent_call_id for c in calls[1:]] == [c.call_id for c in calls[:-1]], "one worker held each session"
        assert_token_exact(store, session["session_id"], spy)
    # Each worker answered its own session's calls, on both wires; the relay's /metrics says which.
    metrics = httpx.get(f"{url}/metrics").text
    for worker in ("0", "1"):
        for endpoint in ("chat", "messages"):
            answered = sample(metrics, "roost_gateway_requests_total", endpoint=endpoint, status="200", worker=worker)
            assert answered and answered >= 1, f"worker {worker} answered no {endpoint} call"
    # Store reads through any worker see both workers' sessions.
    listed = httpx.get(f"{url}/sessions", params={"group": "both"}, headers=bearer(admin_key)).json()
    assert {s["session_id"] for s in listed["sessions"]} >= {s["session_id"] for s in sessions.values()}


def test_bad_requests_are_refused_and_lose_nothing(relay):
    url, admin_key, store = relay
    assert httpx.post(f"{url}/sessions", content=b"{not json", headers=bearer(admin_key)).status_code == 400
    unknown = httpx.post(
        f"{url}/v1/chat/completions",
        headers=bearer("rsk-no-such-session"),
        json={"model": "tiny", "messages": [{"role": "user", "content": "Hi."}]},
    )
    assert unknown.status_code == 401 and unknown.json()["error"]["code"] == "invalid_api_key"
    huge = httpx.post(f"{url}/sessions", content=b" " * (33 * 1024 * 1024), headers=bearer(admin_key))
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "request_too_large"
    assert _health(url)["status"] == "ok"


def _caller(url: str, session: dict, outcomes: list, stop: threading.Event) -> None:
    """A harness that retries a 503 after its Retry-After, as the SDKs do."""
    messages = [{"role": "user", "content": "Count with me."}]
    with httpx.Client(timeout=60) as client:
        turn = 0
        while not stop.is_set():
            answer = client.post(
                f"{session['base_url']}/chat/completions",
                headers=bearer(session["key"]),
                json={"model": "tiny", "messages": messages, **say(f"Number {turn}.")},
            )
            outcomes.append((session["session_id"], answer.status_code, answer.headers.get("retry-after"), answer.text))
            if answer.status_code == 503:
                time.sleep(float(answer.headers["retry-after"]) / 4)
                continue
            if answer.status_code != 200:
                return  # the test reads it in `outcomes`
            messages = messages + [answer.json()["choices"][0]["message"], {"role": "user", "content": "Next."}]
            turn += 1


def _wait_restarted(url: str, index: int, restarts: int) -> dict:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        worker = _health(url)["workers"][index]
        if worker["restarts"] == restarts and worker["status"] == "ok":
            return worker
        time.sleep(0.2)
    raise AssertionError(f"worker {index} was not started again: {_health(url)}")


@pytest.mark.slow
def test_a_killed_worker_costs_only_its_own_sessions_a_retry(relay, spy):
    url, admin_key, store = relay
    sessions = _sessions_on_each_worker(url, admin_key, "kill") | {
        i + WORKERS: s for i, s in _sessions_on_each_worker(url, admin_key, "kill").items()
    }
    outcomes: list = []
    stop = threading.Event()
    threads = [threading.Thread(target=_caller, args=(url, s, outcomes, stop)) for s in sessions.values()]
    victim = _health(url)["workers"][1]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 60
        while len(outcomes) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(victim["pid"], signal.SIGKILL)  # four callers at work: calls are in flight
        back = _wait_restarted(url, 1, victim["restarts"] + 1)
        assert back["pid"] != victim["pid"]
        served = len(outcomes)
        while len(outcomes) < served + 20 and time.monotonic() < deadline + 60:
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    by_worker = {i: [o for o in outcomes if worker_of(o[0], WORKERS) == i] for i in range(WORKERS)}
    assert all(status == 200 for _, status, _, _ in by_worker[0]), "the other worker's sessions were touched"
    refused = [o for o in by_worker[1] if o[1] != 200]
    assert refused, "no call of the killed worker's sessions was answered 503"
    for _, status, retry, text in refused:
        assert status == 503 and retry == "2" and "gateway_worker_unavailable" in text, text
    last_refused = max(i for i, o in enumerate(outcomes) if o[1] != 200)
    assert any(o[1] == 200 and worker_of(o[0], WORKERS) == 1 for o in outcomes[last_refused:]), "none after the restart"
    # Every answered call is in the store (a call cut short by the kill may be there too), and
    # the killed worker's sessions went on from the store: their last call extends the tree.
    for session in sessions.values():
        calls = stored_calls(store, session["session_id"])
        stored = {c.call_id for c in calls}
        answered = [
            orjson.loads(o[3])["id"].removeprefix("chatcmpl-")
            for o in outcomes
            if o[0] == session["session_id"] and o[1] == 200
        ]
        assert set(answered) <= stored
        assert (calls[-1].kind, calls[-1].reuse) == ("extend", "exact")
        assert_token_exact(store, session["session_id"], spy)


def test_control_writes_reach_every_worker_and_a_returning_one(relay):
    url, admin_key, _ = relay
    on_worker_1 = _sessions_on_each_worker(url, admin_key, "control")[1]
    assert httpx.post(f"{url}/admin/pause", headers=bearer(admin_key), timeout=60).status_code == 200
    try:
        workers = _health(url)["workers"]
        assert [_health(w["url"])["paused"] for w in workers] == [True, True]
        victim = workers[0]
        os.kill(victim["pid"], signal.SIGKILL)
        back = _wait_restarted(url, 0, victim["restarts"] + 1)
        assert _health(back["url"])["paused"], "the returning worker did not take the pause"
        paused_call = httpx.post(
            f"{url}/v1/chat/completions", json={"model": "tiny", "messages": [{"role": "user", "content": "Hi."}]}
        )
        assert paused_call.status_code == 503 and paused_call.json()["error"]["code"] == "gateway_paused"
        assert httpx.post(f"{url}/admin/resume", headers=bearer(admin_key), timeout=60).status_code == 200
        assert [_health(w["url"])["paused"] for w in _health(url)["workers"]] == [False, False]

        # A write made while a worker is down reaches the others at once and that one before it
        # serves; a session's request meanwhile is a 503 the trainer's client sends again.
        victim = _health(url)["workers"][1]
        os.kill(victim["pid"], signal.SIGKILL)
        while _health(url)["workers"][1]["status"] != "down":
            time.sleep(0.05)
        assert httpx.post(f"{url}/admin/pause", headers=bearer(admin_key), timeout=60).status_code == 200
        assert _health(_health(url)["workers"][0]["url"])["paused"]
        down = httpx.get(f"{url}/sessions/{on_worker_1['session_id']}", headers=bearer(admin_key))
        assert down.status_code == 503 and down.json()["error"]["code"] == "gateway_worker_unavailable"
        assert down.headers["retry-after"] == "2"
        assert asyncio.run(_call_ids(url, admin_key, on_worker_1["session_id"])) == []  # once it is back
        back = _wait_restarted(url, 1, victim["restarts"] + 1)
        assert _health(back["url"])["paused"], "the returning worker missed the pause made while it was down"
    finally:
        assert httpx.post(f"{url}/admin/resume", headers=bearer(admin_key), timeout=60).status_code == 200
    assert [_health(w["url"])["paused"] for w in _health(url)["workers"]] == [False, False]


async def _call_ids(url: str, admin_key: str, session_id: str) -> list[str]:
    async with GatewayClient(url, admin_key=admin_key) as gateway:
        return await gateway.call_ids(session_id)


def test_a_killed_relay_takes_its_workers_along(relay):
    """Last in this module: it ends the module's relay."""
    url, _, _ = relay
    workers = [psutil.Process(w["pid"]) for w in _health(url)["workers"]]
    relay_pid = psutil.Process(workers[0].pid).ppid()
    assert {psutil.Process(w.pid).ppid() for w in workers} == {relay_pid}
    os.kill(relay_pid, signal.SIGKILL)
    assert_gone(workers)
