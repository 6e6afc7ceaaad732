"""`roost gateway` as a user runs it: its window from --context-length, the bound on replies
whose request sets none (--default-max-tokens), and a clear exit when --backend embedded points
at a server that does not speak SGLang's API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import psutil
import pytest

from roost.rollout.gateway.launch import GatewayProcess

ROOST = [sys.executable, "-m", "roost.cli.main"]


def test_help_shows_context_length():
    done = subprocess.run(
        [*ROOST, "gateway", "--help"], capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"}
    )
    assert done.returncode == 0 and "--context-length" in done.stdout, done.stdout + done.stderr


@pytest.mark.slow
def test_context_length_reaches_the_gateway_and_the_engine_it_starts(tmp_path):
    args = ["--model", "tiny", "--context-length", "8192", "--store", str(tmp_path / "trajectories.sqlite")]
    gateway = GatewayProcess(args)
    url = gateway.start()
    engines = psutil.Process(gateway.process.pid).children(recursive=True)
    try:
        [card] = httpx.get(f"{url}/v1/models").json()["data"]
        assert card["max_model_len"] == 8192
        # past the tiny model's default 4096: only an engine started with the same window takes it
        long = " ".join(["word"] * 5000)
        reply = httpx.post(
            f"{url}/v1/chat/completions",
            timeout=300,
            json={"model": "tiny", "max_tokens": 1, "messages": [{"role": "user", "content": long}]},
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["prompt_tokens"] > 4096
    finally:
        gateway.stop()
        # uvicorn re-raises SIGTERM once it has shut down, so the gateway dies before it can stop its engine
        for engine in engines:
            if engine.is_running():
                engine.terminate()
        psutil.wait_procs(engines, timeout=15)


def test_default_max_tokens_bounds_a_reply_the_request_does_not(scripted_engine_url, tmp_path):
    """Codex sends no max_output_tokens: the gateway's bound ends the reply instead of the context."""
    args = [
        "--engine-url",
        scripted_engine_url,
        "--model",
        "tiny",
        "--default-max-tokens",
        "8",
        "--store",
        str(tmp_path / "trajectories.sqlite"),
    ]
    gateway = GatewayProcess(args)
    with gateway as url:
        session = httpx.post(f"{url}/sessions", json={}, headers={"Authorization": f"Bearer {gateway.admin_key}"})
        reply = httpx.post(
            f"{session.json()['base_url']}/responses",
            timeout=60,
            headers={"Authorization": f"Bearer {session.json()['key']}"},
            json={"model": "tiny", "input": "Talk.", "custom_params": {"scripted_reply": " ".join(["word"] * 40)}},
        )
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    assert answer["status"] == "incomplete" and answer["usage"]["output_tokens"] == 8


class OpenAIOnly(BaseHTTPRequestHandler):
    """A test double of a foreign server: OpenAI's /v1/models, 404 for everything else."""

    def do_GET(self) -> None:
        found = self.path == "/v1/models"
        body = json.dumps(
            {"object": "list", "data": [{"id": "m", "object": "model"}]} if found else {"detail": "Not Found"}
        ).encode()
        self.send_response(200 if found else 404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_an_embedded_backend_pointed_at_an_openai_server_exits_at_once_naming_the_right_backend(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), OpenAIOnly)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    upstream = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        started = time.monotonic()
        done = subprocess.run(
            [
                *ROOST,
                "gateway",
                "--backend",
                "embedded",
                "--engine-url",
                upstream,
                "--port",
                "0",
                "--store",
                str(tmp_path / "t.sqlite"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        took = time.monotonic() - started
    finally:
        server.shutdown()
    assert done.returncode != 0
    assert f"--backend openai --engine-url {upstream}/v1" in done.stderr, done.stderr[-3000:]
    assert took < 30  # it used to wait out the 60 s engine startup timeout
