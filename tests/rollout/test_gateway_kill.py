"""A gateway killed with SIGKILL under load loses no call whose response was returned,
and a new gateway on the same store continues its sessions' token trees."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time

import httpx
import pytest

from roost.rollout.gateway.launch import GatewayProcess
from roost.rollout.keys import bearer
from roost.rollout.store.reader import TrajectoryReader
from roost.tests.rollout.gateway_helpers import EngineSpy, assert_token_exact, say, stored_calls


@pytest.fixture(scope="module")
def spy(scripted_engine_url):
    with EngineSpy(scripted_engine_url) as spy:
        yield spy


def _worker(url: str, admin_key: str, returned: list, stop: threading.Event, conversations: dict) -> None:
    with httpx.Client(timeout=30) as client:
        try:
            session = client.post(f"{url}/sessions", json={"group_id": "kill"}, headers=bearer(admin_key)).json()
            messages = [{"role": "user", "content": "Count with me."}]
            turn = 0
            while not stop.is_set():
                resp = client.post(
                    f"{session['base_url']}/chat/completions",
                    headers=bearer(session["key"]),
                    json={"model": "tiny", "messages": messages, **say(f"Number {turn}.")},
                )
                body = resp.json()
                returned.append((session["session_id"], body["id"].removeprefix("chatcmpl-")))
                messages = messages + [body["choices"][0]["message"], {"role": "user", "content": "Next."}]
                conversations[session["session_id"]] = session["key"], messages
                turn += 1
        except (httpx.HTTPError, KeyError, ValueError):
            return  # the gateway died under us: expected


@pytest.mark.slow
def test_sigkill_loses_no_returned_call(spy, tmp_path):
    store = tmp_path / "trajectories.sqlite"
    args = ["--engine-url", spy.url, "--model", "tiny", "--store", str(store)]
    gateway = GatewayProcess(args)
    url = gateway.start()
    returned: list = []
    conversations: dict = {}
    stop = threading.Event()
    threads = [
        threading.Thread(target=_worker, args=(url, gateway.admin_key, returned, stop, conversations)) for _ in range(8)
    ]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(returned) < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(gateway.process.pid, signal.SIGKILL)  # mid-load: calls are in flight
        gateway.process.wait()
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        gateway.stop()
    assert len(returned) >= 40
    with sqlite3.connect(store) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with TrajectoryReader(store) as reader:
        for sid, call_id in returned:
            call = reader.call(call_id)
            assert call is not None, f"call {call_id} was returned but is not in the store"
            assert call.session_id == sid
    for sid in {sid for sid, _ in returned}:
        assert_token_exact(store, sid, spy)

    # A new gateway on the same store picks the conversations up where they were.
    sid, (key, messages) = next(iter(conversations.items()))
    with GatewayProcess(args) as url2:
        resp = httpx.post(
            f"{url2}/sessions/{sid}/v1/chat/completions",
            headers=bearer(key),
            json={"model": "tiny", "messages": messages, **say("Resumed.")},
            timeout=30,
        )
        assert resp.status_code == 200, resp.text
    last = stored_calls(store, sid)[-1]
    assert last.kind == "extend" and last.reuse == "exact"
