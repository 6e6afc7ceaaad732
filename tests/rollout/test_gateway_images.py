"""Image parts: the pass-through backend forwards chat `image_url` parts unchanged to a vision
model's server and records them with the call; a token engine serving a text-only model
answers an image part on every wire with a 400 naming the model, recording nothing."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import openai

from roost.tests.rollout.gateway_helpers import new_session, start_gateway, stored_calls

PIXEL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0g"
    "AAAABJRU5ErkJggg=="
)
ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "vision",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "A red pixel."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
}


class VisionUpstream(ThreadingHTTPServer):
    """A stand-in for a vision model's OpenAI-compatible server: it keeps the bodies it gets."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _send(self, body: dict) -> None:
                raw = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                self._send({"object": "list", "data": [{"id": "vision", "object": "model", "owned_by": "x"}]})

            def do_POST(self) -> None:
                upstream.bodies.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
                self._send(ANSWER)

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


def test_passthrough_forwards_and_records_image_parts(tmp_path):
    upstream = VisionUpstream()
    server = start_gateway(upstream.url, tmp_path / "t.sqlite", backend="openai", model=None)
    try:
        session = new_session(server)
        client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"], max_retries=0)
        content = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": PIXEL}}]
        reply = client.chat.completions.create(model="vision", messages=[{"role": "user", "content": content}])
    finally:
        server.stop()
        upstream.shutdown()
    assert reply.choices[0].message.content == "A red pixel."
    assert upstream.bodies[0]["messages"][0]["content"] == content
    [call] = stored_calls(tmp_path / "t.sqlite", session["session_id"])
    assert call.request["messages"][0]["content"] == content and call.backend == "openai"


def test_text_only_engine_refuses_images_on_every_wire_by_model_name(spied_scripted_gateway):
    server, store, _ = spied_scripted_gateway
    session = new_session(server)
    headers = {"Authorization": f"Bearer {session['key']}"}
    bodies = {
        "chat/completions": {
            "model": "tiny",
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": PIXEL}}]}],
        },
        "messages": {
            "model": "tiny",
            "max_tokens": 8,
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}],
                }
            ],
        },
        "responses": {
            "model": "tiny",
            "input": [{"role": "user", "content": [{"type": "input_image", "image_url": PIXEL}]}],
        },
    }
    for path, body in bodies.items():
        resp = httpx.post(f"{session['base_url']}/{path}", json=body, headers=headers)
        assert resp.status_code == 400, resp.text
        assert "'tiny'" in resp.text and "image" in resp.text and "text only" in resp.text, resp.text
    assert stored_calls(store, session["session_id"]) == []
