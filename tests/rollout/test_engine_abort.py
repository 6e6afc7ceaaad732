"""Stopping a generation: the engine aborts a /generate whose client hung up, and one named
in SGLang's /abort_request; either way the slot is freed long before max_new_tokens."""

from __future__ import annotations

import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
import orjson

LONG = {"max_new_tokens": 3000, "ignore_eos": True}


def info(url: str) -> dict:
    return httpx.get(f"{url}/get_server_info").json()


def wait_running(url: str, running: bool) -> None:
    deadline = time.monotonic() + 60
    while bool(info(url)["running"]) != running:
        assert time.monotonic() < deadline, f"running never became {running}"
        time.sleep(0.05)


def test_a_generate_whose_client_hangs_up_is_aborted(engine_url):
    steps_before = info(engine_url)["decode_steps"]
    parts = urlsplit(engine_url)
    body = orjson.dumps({"input_ids": [1, 2, 3], "sampling_params": LONG, "rid": "hang-up"})
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(
            b"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        wait_running(engine_url, True)
    wait_running(engine_url, False)
    assert info(engine_url)["decode_steps"] - steps_before < 1500


def test_abort_request_stops_a_generation(engine_url):
    answer = {}

    def generate() -> None:
        answer["body"] = httpx.post(
            f"{engine_url}/generate",
            timeout=120,
            json={"input_ids": [1, 2, 3], "sampling_params": LONG, "rid": "to-abort"},
        ).json()

    caller = threading.Thread(target=generate)
    caller.start()
    wait_running(engine_url, True)
    assert httpx.post(f"{engine_url}/abort_request", json={"rid": "to-abort"}).status_code == 200
    caller.join(60)
    meta = answer["body"]["meta_info"]
    assert meta["finish_reason"]["type"] == "abort" and meta["completion_tokens"] < 1500
    assert info(engine_url)["running"] == 0
    refused = httpx.post(f"{engine_url}/abort_request", json={})
    assert refused.status_code == 400 and "rid" in refused.json()["error"]["message"]
