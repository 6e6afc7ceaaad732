"""Program-aware admission (`--admission-programs N`): a session is admitted whole at its first
call; past N running sessions a new one's first call waits until one finishes, the running ones'
later calls never wait, and a first call held `admission_wait_s` goes anyway (fail-open). A held
call records how long it waited, and is traced waiting."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from roost import tracing
from roost.rollout.gateway.core.admission import Admission
from roost.rollout.keys import bearer
from roost.tests.prometheus_samples import sample
from roost.tests.rollout.gateway_helpers import new_session, say, start_gateway


async def test_past_the_limit_a_first_call_waits_for_a_finish_and_a_running_program_never_waits():
    admission = Admission(programs=2, max_wait_s=5.0, idle_s=60.0)
    assert [await admission.admit(s) for s in ("a", "b")] == ["admitted", "admitted"]
    waiting = asyncio.ensure_future(admission.admit("c"))
    await asyncio.sleep(0.2)
    assert not waiting.done() and admission.waiting == 1
    assert await admission.admit("a") == "running"  # an admitted program's next call goes through
    await admission.finish("a")
    assert await asyncio.wait_for(waiting, 1.0) == "deferred"
    assert admission.active == 2 and admission.counts == {"admitted": 2, "deferred": 1, "let_through": 0}


async def test_a_first_call_held_too_long_goes_anyway_and_idle_programs_stop_counting():
    admission = Admission(programs=1, max_wait_s=0.3, idle_s=60.0)
    await admission.admit("a")
    started = time.monotonic()
    assert await admission.admit("b") == "let_through"
    assert 0.3 <= time.monotonic() - started < 2.0
    now = [100.0]
    idle = Admission(programs=1, max_wait_s=5.0, idle_s=10.0, clock=lambda: now[0])
    await idle.admit("a")
    now[0] += 11  # a went quiet: its place is free
    assert await asyncio.wait_for(idle.admit("b"), 1.0) == "admitted"


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
