"""`GET /metrics` of the gateway and the engine: each server counts in its own registry, so two
in one process keep their own counts, and the engine counts what /generate answered."""

from __future__ import annotations

import httpx
import openai
import uvicorn
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4 as PROMETHEUS_TEXT

from roost.rollout.engine.launch import build_engine
from roost.rollout.engine.server import create_app
from roost.serving.thread import UvicornThread
from roost.tests.prometheus_samples import sample
from roost.tests.rollout.gateway_helpers import new_session, say, start_gateway


def scrape(url: str) -> str:
    answer = httpx.get(f"{url}/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"] == PROMETHEUS_TEXT
    return answer.text


def test_two_gateways_in_one_process_keep_their_own_counts(scripted_engine_url, tmp_path):
    busy = start_gateway(scripted_engine_url, tmp_path / "busy.sqlite")
    idle = start_gateway(scripted_engine_url, tmp_path / "idle.sqlite")
    try:
        session = new_session(busy)
        client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"])
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], extra_body=say("Hello there.")
        )
        busy_text, idle_text = scrape(busy.url), scrape(idle.url)
    finally:
        busy.stop()
        idle.stop()
    assert sample(busy_text, "roost_gateway_calls_total", endpoint="chat", kind="root", reuse="none") == 1
    assert sample(idle_text, "roost_gateway_calls_total", endpoint="chat", kind="root", reuse="none") is None
    assert sample(busy_text, "roost_gateway_completion_tokens_total") > 0
    assert sample(idle_text, "roost_gateway_completion_tokens_total") == 0
    assert sample(busy_text, "roost_gateway_request_seconds_count", endpoint="chat") == 1
    assert sample(busy_text, "roost_gateway_in_flight") == 0


def test_two_engine_servers_on_one_engine_count_their_own_requests():
    engine = build_engine("tiny", scripted=True)
    engine.start()
    try:
        with (
            UvicornThread(uvicorn.Config(create_app(engine, "key"), log_level="warning"), "engine A") as a,
            UvicornThread(uvicorn.Config(create_app(engine, "key"), log_level="warning"), "engine B") as b,
        ):
            body = {
                "input_ids": [1, 2, 3],
                "sampling_params": {"max_new_tokens": 8, "custom_params": {"scripted_reply": "OK."}},
            }
            answers = [
                httpx.post(f"{a}/generate", json={**body, "stream": stream}, timeout=60) for stream in (False, True)
            ]
            a_text, b_text = scrape(a), scrape(b)
    finally:
        engine.stop()
    assert all(answer.status_code == 200 for answer in answers)
    sampled = len(answers[0].json()["output_ids"])
    assert sample(a_text, "roost_engine_requests_total", finish="stop") == 2
    assert sample(a_text, "roost_engine_prompt_tokens_total") == 6
    assert sample(a_text, "roost_engine_completion_tokens_total") == 2 * sampled
    assert sample(a_text, "roost_engine_request_seconds_count") == 2
    assert sample(b_text, "roost_engine_requests_total", finish="stop") is None
    assert sample(b_text, "roost_engine_completion_tokens_total") == 0
    # the scheduler is the engine's, shared by both servers
    assert sample(a_text, "roost_engine_decode_steps_total") == sample(b_text, "roost_engine_decode_steps_total") > 0
    assert sample(a_text, "roost_engine_running_requests") == 0
