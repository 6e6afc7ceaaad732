"""Malformed, oversized or impossible requests get a precise 4xx; the engine keeps serving."""

from __future__ import annotations

import httpx
import pytest

from roost.rollout.keys import bearer

OK = {"text": "hi", "sampling_params": {"max_new_tokens": 2}}

CASES = [
    (b"{not json", 400, "malformed JSON"),
    (b"[1, 2]", 400, "JSON object"),
    (b'{"sampling_params": {"max_new_tokens": 2}}', 400, "exactly one of `text` or `input_ids`"),
    (b'{"input_ids": [], "sampling_params": {}}', 400, "prompt is empty"),
    (b'{"input_ids": [1, 999999999]}', 400, "outside the vocabulary"),
    (b'{"text": "hi", "sampling_params": {"temprature": 0.5}}', 400, "unknown sampling parameter(s) temprature"),
    (b'{"text": "hi", "sampling_params": {"temperature": -1}}', 400, "temperature"),
    (b'{"text": "hi", "sampling_params": {"top_p": 0}}', 400, "top_p"),
    (b'{"text": "hi", "sampling_params": {"top_k": 0}}', 400, "top_k must be -1"),
    (b'{"text": "hi", "sampling_params": {"frequency_penalty": 0.5}}', 400, "frequency_penalty=0.5 is not supported"),
    (b'{"text": "hi", "sampling_params": {"n": 2}}', 400, "n must be 1"),
    (b'{"text": "hi", "image_data": "x.png"}', 400, "image_data"),
    (b'{"text": ["a", "b"]}', 400, "batched"),
    (b'{"text": "hi", "bogus_field": 1}', 400, "bogus_field"),
    (b'{"text": "hi", "sampling_params": {"custom_params": {"scripted_reply": 5}}}', 400, "must be a string"),
]


@pytest.mark.parametrize("body,status,needle", CASES, ids=[c[2] for c in CASES])
def test_bad_request_gets_precise_error(engine_url, body, status, needle):
    with httpx.Client() as client:
        resp = client.post(f"{engine_url}/generate", content=body, headers={"content-type": "application/json"})
        assert resp.status_code == status, resp.text
        assert needle in resp.json()["error"]["message"]
        assert client.post(f"{engine_url}/generate", json=OK).status_code == 200


def test_prompt_past_context_length(engine_url):
    with httpx.Client() as client:
        limit = client.get(f"{engine_url}/get_model_info").json()["max_context_length"]
        resp = client.post(f"{engine_url}/generate", json={"input_ids": [100] * limit})
        assert resp.status_code == 400 and f"context length is {limit}" in resp.json()["error"]["message"]
        assert client.post(f"{engine_url}/generate", json=OK).status_code == 200


def test_oversized_body_is_refused(engine_url):
    body = b'{"text": "' + b"a" * (17 * 1024 * 1024) + b'"}'
    with httpx.Client(timeout=60) as client:
        resp = client.post(f"{engine_url}/generate", content=body)
        assert resp.status_code == 413
        assert client.post(f"{engine_url}/generate", json=OK).status_code == 200


def test_bad_update_request_and_pause_mode(model_engine):
    engine_url = model_engine.url
    with httpx.Client(headers=bearer(model_engine.api_key)) as client:
        assert client.post(f"{engine_url}/update_weights_from_disk", json={"path": "x"}).status_code == 400
        assert client.post(f"{engine_url}/pause_generation", json={"mode": "sideways"}).status_code == 400
        assert client.post(f"{engine_url}/roost/scripted_sampler", json={"rules": []}).status_code == 409
        assert client.post(f"{engine_url}/generate", json=OK).status_code == 200
