"""No request stalls the gateway: an endless body is refused while it arrives, a prompt far
past the context length before it is rendered, a big prompt is prepared while other requests
are answered, and a client that hangs up stops its generation (nothing is recorded)."""

from __future__ import annotations

import re
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from roost.tests.prometheus_samples import sample
from roost.tests.rollout.gateway_helpers import new_session, say, start_gateway, stored_calls

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def gateway(scripted_engine_url, tmp_path_factory):
    store = tmp_path_factory.mktemp("store") / "trajectories.sqlite"
    server = start_gateway(scripted_engine_url, store)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def sampling_gateway(engine_url, tmp_path_factory):
    """In front of the engine that samples from its model: a generation takes seconds."""
    store = tmp_path_factory.mktemp("store") / "trajectories.sqlite"
    server = start_gateway(engine_url, store)
    yield server, engine_url, store
    server.stop()


def connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=20)
    return sock


def request_head(path: str, headers: dict[str, str]) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def metric(url: str, name: str, **labels: str) -> float:
    return sample(httpx.get(f"{url}/metrics").text, name, **labels) or 0.0


def test_chunked_body_past_the_limit_is_refused_before_it_ends(gateway):
    sock = connect(gateway.url)
    sock.sendall(request_head("/v1/chat/completions", {"Transfer-Encoding": "chunked"}))
    chunk = b"x" * MIB
    for _ in range(33):  # past the 32 MiB limit; the body's last chunk is never sent
        sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    answer = b""
    while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
        data = sock.recv(65536)
        if not data:
            break
        answer += data
    sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert orjson.loads(body)["error"]["code"] == "request_too_large"
    assert httpx.get(f"{gateway.url}/health").status_code == 200
    ok = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], **say("fine")},
    )
    assert ok.json()["choices"][0]["message"]["content"] == "fine"


def test_prompt_far_past_the_context_is_refused_without_tokenizing_it(gateway):
    content = "a b " * 7_400_000  # 29.6 MB, some 15 M tokens
    body = orjson.dumps({"model": "tiny", "messages": [{"role": "user", "content": content}]})
    assert len(body) < 32 * MIB
    resp = httpx.post(
        f"{gateway.url}/v1/chat/completions", content=body, headers={"content-type": "application/json"}, timeout=60
    )
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == "context_length_exceeded" and "context length is 4096" in error["message"]
    # A bound from the length in characters, far below the real count: nothing was tokenized.
    at_least = int(re.search(r"at least (\d+) tokens", error["message"])[1])
    assert 4096 < at_least < len(content) // 100


def test_other_requests_are_answered_while_a_big_call_is_prepared(gateway):
    content = "Tokenizing this takes a while. " * 50_000  # 1.5 M characters: past the context once tokenized
    outcome = {}

    def big_call() -> None:
        outcome["resp"] = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            timeout=120,
            json={"model": "tiny", "messages": [{"role": "user", "content": content}]},
        )

    caller = threading.Thread(target=big_call)
    caller.start()
    seen_in_flight, slowest = False, 0.0
    while caller.is_alive() and not seen_in_flight:
        started = time.perf_counter()
        seen_in_flight = metric(gateway.url, "roost_gateway_in_flight") == 1
        slowest = max(slowest, time.perf_counter() - started)
    caller.join()
    assert seen_in_flight, "no request was answered while the big call was being prepared"
    assert slowest < 2.0
    assert outcome["resp"].json()["error"]["code"] == "context_length_exceeded"


def hang_up_during_generation(url: str, path: str, key: str, body: dict, engine_url: str, stream: bool) -> None:
    """Send a long generation, wait until the engine runs it, then close the connection."""
    sock = connect(url)
    raw = orjson.dumps(body)
    sock.sendall(request_head(path, {"Content-Length": str(len(raw)), "Authorization": f"Bearer {key}"}) + raw)
    if stream:
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    deadline = time.monotonic() + 30
    while httpx.get(f"{engine_url}/get_server_info").json()["running"] == 0:
        assert time.monotonic() < deadline, "the engine never started the generation"
        time.sleep(0.05)
    sock.close()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_client_that_hangs_up_stops_its_generation(sampling_gateway, stream):
    server, engine_url, store = sampling_gateway
    session = new_session(server)
    steps_before = httpx.get(f"{engine_url}/get_server_info").json()["decode_steps"]
    aborted_before = metric(server.url, "roost_gateway_calls_aborted_total", endpoint="chat")
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Tell me everything."}],
        "max_tokens": 3000,
        "ignore_eos": True,
        "stream": stream,
    }
    hang_up_during_generation(
        server.url, f"/sessions/{session['session_id']}/v1/chat/completions", session["key"], body, engine_url, stream
    )
    deadline = time.monotonic() + 60
    while httpx.get(f"{engine_url}/get_server_info").json()["running"]:
        assert time.monotonic() < deadline, "the engine is still generating for a client that left"
        time.sleep(0.05)
    assert httpx.get(f"{engine_url}/get_server_info").json()["decode_steps"] - steps_before < 1500
    while metric(server.url, "roost_gateway_calls_aborted_total", endpoint="chat") == aborted_before:
        assert time.monotonic() < deadline, "the abandoned call was not counted"
        time.sleep(0.05)
    assert stored_calls(store, session["session_id"]) == []
