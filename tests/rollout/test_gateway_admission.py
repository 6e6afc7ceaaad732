"""Program-aware admission (`--admission-programs N|auto`): a session is admitted whole at its
first call; past N running sessions (or past the engines' token budget) a new one's first call
waits until one finishes, the running ones' later calls never wait, and a first call held
`admission_wait_s` goes anyway (fail-open). `auto` reads the budget from the engines' own reports,
and `/health` tells a runner how much room there is. A held call records how long it waited,
and is traced waiting."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from roost import tracing
from roost.rollout.engine_api.capacity import EngineCapacity, sglang_capacity, vllm_capacity
from roost.rollout.gateway.core.admission import Admission
from roost.rollout.gateway.core.admission_budget import FixedBudget
from roost.rollout.keys import bearer
from roost.tests.prometheus_samples import sample
from roost.tests.rollout.gateway_helpers import new_session, say, start_gateway


async def test_past_the_limit_a_first_call_waits_for_a_finish_and_a_running_program_never_waits():
    admission = Admission(FixedBudget(2), max_wait_s=5.0, idle_s=60.0)
    assert [await admission.admit(s) for s in ("a", "b")] == ["admitted", "admitted"]
    waiting = asyncio.ensure_future(admission.admit("c"))
    await asyncio.sleep(0.2)
    assert not waiting.done() and admission.waiting == 1
    assert await admission.admit("a") == "running"  # an admitted program's next call goes through
    await admission.finish("a")
    assert await asyncio.wait_for(waiting, 1.0) == "deferred"
    assert admission.active == 2 and admission.counts == {
        "admitted": 2,
        "deferred": 1,
        "let_through": 0,
        "paused": 0,
        "resumed": 0,
    }


async def test_a_first_call_held_too_long_goes_anyway_and_idle_programs_stop_counting():
    admission = Admission(FixedBudget(1), max_wait_s=0.3, idle_s=60.0)
    await admission.admit("a")
    started = time.monotonic()
    assert await admission.admit("b") == "let_through"
    assert 0.3 <= time.monotonic() - started < 2.0
    now = [100.0]
    idle = Admission(FixedBudget(1), max_wait_s=5.0, idle_s=10.0, clock=lambda: now[0])
    await idle.admit("a")
    now[0] += 11  # a went quiet: its place is free
    assert await asyncio.wait_for(idle.admit("b"), 1.0) == "admitted"


class Tokens:
    """A budget of KV tokens only, as an SGLang engine reports it."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens

    async def capacity(self) -> EngineCapacity:
        return EngineCapacity(tokens=self.tokens)


async def test_against_a_token_budget_a_program_waits_until_the_running_ones_leave_room_for_its_expected_size():
    admission = Admission(Tokens(1500), max_wait_s=5.0, idle_s=60.0)
    assert await admission.admit("a") == "admitted"  # alone, a program always fits
    admission.note("a", 400)
    assert await admission.admit("b") == "admitted"  # 400 held + 400 expected (a's size so far) <= 1500
    admission.note("b", 600)
    # each running one counts at least the expected size (500, their mean): 500 + 600 + 500 > 1500
    assert (admission.held_tokens, admission.expected_tokens, admission.committed_tokens) == (1000, 500, 1100)
    assert admission.room(EngineCapacity(tokens=1500)) == 0
    waiting = asyncio.ensure_future(admission.admit("c"))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await admission.finish("b")  # b's peak is now the expected size: a counts 600, 600 + 600 <= 1500
    assert await asyncio.wait_for(waiting, 2.0) == "deferred"
    assert (admission.expected_tokens, admission.committed_tokens) == (600, 1200)
    assert admission.room(EngineCapacity(tokens=1500)) == 0
    assert admission.room(EngineCapacity(programs=8, tokens=3000)) == 3  # (3000 - 1200) // 600
    assert admission.room(EngineCapacity(programs=3, tokens=3000)) == 1
    assert admission.room(EngineCapacity()) is None


async def test_programs_grown_past_the_budget_are_paused_at_a_call_and_resumed_when_they_fit_again():
    admission = Admission(Tokens(1000), max_wait_s=5.0, idle_s=60.0)
    for session in ("a", "b"):
        assert await admission.admit(session) == "admitted"
        admission.note(session, 300)
    admission.note("a", 400)
    admission.note("b", 700)  # b grew: without it, a counts 400 (its size, the expected one) and 400 + 700 > 1000
    held = asyncio.ensure_future(admission.admit("b"))  # b's next call: paused
    await asyncio.sleep(0.2)
    assert not held.done() and admission.is_paused("b") and admission.active == 1
    assert await admission.admit("a") == "running"  # the first admitted is never paused
    await admission.finish("a")
    assert await asyncio.wait_for(held, 2.0) == "resumed"
    assert admission.held_tokens == 700 and admission.counts["paused"] == 1
    # a paused program held past max_wait_s goes anyway
    hurried = Admission(Tokens(1000), max_wait_s=0.3, idle_s=60.0)
    for session, size in (("a", 300), ("b", 900)):
        await hurried.admit(session)
        hurried.note(session, size)
    assert await asyncio.wait_for(hurried.admit("b"), 2.0) == "let_through"


def test_engine_reports_read_as_sglang_and_vllm_write_them():
    # SGLang's /get_server_info: scheduler info on top, each data-parallel rank's state below
    assert sglang_capacity({"max_total_num_tokens": 81920, "max_running_requests": None}) == EngineCapacity(None, 81920)
    ranks = {
        "internal_states": [{"memory_usage": {"token_capacity": 5000}}, {"memory_usage": {"token_capacity": 7000}}]
    }
    assert sglang_capacity(ranks) == EngineCapacity(None, 12000)
    text = (
        "# HELP vllm:cache_config_info Information of the LLMCache\n# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="2048",prefix_caching_hash_algo="sha256"} 1.0\n'
    )
    assert vllm_capacity(text) == EngineCapacity(None, 2048 * 16)
    assert vllm_capacity("") == EngineCapacity() and not EngineCapacity().known
    assert (EngineCapacity(2, 100) + EngineCapacity(None, 50)).share(0.5) == EngineCapacity(1, 75)


def test_auto_admission_takes_the_engines_reported_capacity_and_health_reports_the_room(scripted_engine_url, tmp_path):
    info = httpx.get(f"{scripted_engine_url}/get_server_info").json()
    slots, pool = info["max_running_requests"], info["max_total_num_tokens"]
    assert pool == slots * info["context_length"]
    server = start_gateway(scripted_engine_url, tmp_path / "t.sqlite", admission_programs="auto")
    try:
        state = httpx.get(f"{server.url}/health").json()["admission"]
        assert (state["capacity_programs"], state["capacity_tokens"]) == (slots, pool)
        assert (state["programs_running"], state["room"]) == (0, slots)
        session = new_session(server, group_id="auto")
        answer = _chat(session, "One.")
        assert answer.status_code == 200
        usage = answer.json()["usage"]
        state = httpx.get(f"{server.url}/health").json()["admission"]
        assert state["programs_running"] == 1 and state["held_tokens"] == usage["total_tokens"]
        assert state["room"] == min(slots - 1, pool // usage["total_tokens"] - 1)
    finally:
        server.stop()


def _chat(session: dict, text: str) -> httpx.Response:
    return httpx.post(
        f"{session['base_url']}/chat/completions",
        headers=bearer(session["key"]),
        json={"model": "tiny", "messages": [{"role": "user", "content": "Hi."}], **say(text)},
        timeout=60,
    )


@pytest.fixture
def gateway(scripted_engine_url, tmp_path):
    server = start_gateway(scripted_engine_url, tmp_path / "t.sqlite", admission_programs=1, admission_wait_s=20)
    yield server
    server.stop()


def test_the_gateway_holds_a_new_sessions_first_call_until_a_running_one_finishes(gateway):
    first, second = new_session(gateway, group_id="adm"), new_session(gateway, group_id="adm")
    assert _chat(first, "One.").status_code == 200
    answers: list[httpx.Response] = []
    held = threading.Thread(target=lambda: answers.append(_chat(second, "Two.")))
    held.start()
    time.sleep(1.0)
    assert not answers, "the second session's first call went through while the first one runs"
    assert _chat(first, "Again.").status_code == 200  # the running session is never held
    metrics = httpx.get(f"{gateway.url}/metrics").text
    assert sample(metrics, "roost_gateway_programs_waiting") == 1.0
    finished = time.monotonic()
    done = httpx.post(
        f"{gateway.url}/sessions/{first['session_id']}/finish", json={}, headers=bearer(gateway.admin_key)
    )
    assert done.status_code == 200
    held.join(20)
    assert answers and answers[0].status_code == 200 and time.monotonic() - finished < 10
    metrics = httpx.get(f"{gateway.url}/metrics").text
    assert sample(metrics, "roost_gateway_admissions_total", outcome="deferred") == 1.0
    assert sample(metrics, "roost_gateway_programs_running") == 1.0


def test_a_held_call_records_its_wait_and_is_traced_waiting(scripted_engine_url, tmp_path, monkeypatch):
    spans = InMemorySpanExporter()
    monkeypatch.setattr(tracing, "_exporter", lambda: spans)
    server = start_gateway(
        scripted_engine_url, tmp_path / "t.sqlite", admission_programs=1, admission_wait_s=20, trace=True
    )
    admin = bearer(server.admin_key)
    try:
        first, second = new_session(server), new_session(server)
        assert _chat(first, "One.").status_code == 200
        answers: list[httpx.Response] = []
        held = threading.Thread(target=lambda: answers.append(_chat(second, "Two.")))
        held.start()
        deadline = time.monotonic() + 10
        while sample(httpx.get(f"{server.url}/metrics").text, "roost_gateway_programs_waiting") != 1.0:
            assert time.monotonic() < deadline, "the second session's first call never reached admission"
            time.sleep(0.02)
        time.sleep(0.3)  # the second session's first call waits while the first session runs
        httpx.post(f"{server.url}/sessions/{first['session_id']}/finish", json={}, headers=admin).raise_for_status()
        held.join(20)
        assert answers and answers[0].status_code == 200
        views = [httpx.get(f"{server.url}/sessions/{s['session_id']}", headers=admin).json() for s in (first, second)]
    finally:
        server.stop()  # exports the spans
    assert views[0]["calls"][0]["timings"]["held_ms"] == 0.0  # it went at once
    [waited] = views[1]["calls"]
    held_ms = waited["timings"]["held_ms"]
    assert 300 <= held_ms <= waited["timings"]["prepare_ms"] and views[1]["program"]["held_ms"] == held_ms
    [admission] = [s for s in spans.get_finished_spans() if s.name == "gateway.admission"]
    assert dict(admission.attributes) == {"roost.session_id": second["session_id"], "roost.admission": "deferred"}
    assert held_ms - 50 <= (admission.end_time - admission.start_time) / 1e6 <= held_ms
    by_id = {s.context.span_id: s for s in spans.get_finished_spans()}
    assert by_id[admission.parent.span_id].name == "gateway.call"
