"""SGLang's streaming sessions (`SessionMode.STREAMING`, the gateway's `sglang_sessions`): the
client's bodies are SGLang's own, a call that extends its session's last one sends only its
new tokens and answers exactly as the whole prompt does, anything else goes plain, and the
embedded engine builds the prompt from the stored request as SGLang's `Session.create_req`
does. No real SGLang runs here (it needs a GPU): the embedded engine stands in for it."""

from __future__ import annotations

import asyncio
import dataclasses

import httpx
import pytest

from roost.rollout.engine.sessions import SessionTable
from roost.rollout.engine_api.sglang_client import SessionMode, SGLangClient, request_body
from roost.rollout.engine_api.sglang_sessions import StreamingSessions
from roost.rollout.engine_api.wire import (
    CloseSessionRequest,
    OpenSessionRequest,
    RequestError,
    SessionParams,
    parse_generate,
)
from roost.rollout.keys import bearer
from roost.tests.prometheus_samples import sample
from roost.tests.rollout.gateway_helpers import new_session, say, start_gateway

io_struct = pytest.importorskip("sglang.srt.managers.io_struct")

GREEDY = {"max_new_tokens": 5, "temperature": 0.0, "ignore_eos": True}
TURNS = [list(range(100, 140)), list(range(300, 312)), list(range(500, 509))]


def test_the_clients_session_bodies_are_sglangs():
    client = SGLangClient("http://127.0.0.1:1", sessions=SessionMode.STREAMING)
    opened = client.open_session_payload("episode-1")
    known = {f.name for f in dataclasses.fields(io_struct.OpenSessionReqInput)}
    # SGLang 0.5.3 (installed) predates streaming sessions; its successors take `streaming` too
    assert set(opened) - known <= {"streaming"} and opened["streaming"] is True
    io_struct.OpenSessionReqInput(**{k: v for k, v in opened.items() if k in known})
    OpenSessionRequest.model_validate(opened)
    sessions = StreamingSessions()
    first = sessions.plan("episode-1", [1, 2, 3], None)
    sessions.opened(first)
    assert sessions.finished(first, [1, 2, 3], [4, 5], prompt_tokens=3)
    following = sessions.plan("episode-1", [1, 2, 3, 4, 5, 6, 7], "call-2")
    for call in (first, following):
        body = client.generate_payload(call, GREEDY, stream=False)
        io_struct.GenerateReqInput(**body)
        assert parse_generate(body).session_params == SessionParams(**call.session_params)
    assert following.input_ids == [6, 7] and following.session_params == {"id": "episode-1", "rid": first.rid}
    closed = request_body(CloseSessionRequest(session_id="episode-1"))
    io_struct.CloseSessionReqInput(**closed)


def test_only_a_call_that_extends_a_finished_one_continues_it():
    sessions = StreamingSessions()
    first = sessions.plan("s", [1, 2], "r1")
    assert first.opens and sessions.plan("s", [1, 2, 9], "r2").session_params is None  # r1 still runs
    sessions.opened(first)
    sessions.finished(first, [1, 2], [3], prompt_tokens=2)
    assert sessions.plan("s", [1, 7, 7], "fork").session_params is None, "a fork goes plain"
    assert sessions.plan("s", [1, 2, 3], "same").session_params is None, "no new token: plain"
    kept = sessions.plan("s", [1, 2, 3, 4], "r3")
    assert kept.input_ids == [4] and kept.session_params == {"id": "s", "rid": "r1"}
    assert not sessions.finished(kept, [1, 2, 3, 4], [5], prompt_tokens=1), "the engine ran another prompt"
    assert sessions.plan("s", [1, 2, 3, 4, 5, 6], "r4").session_params is None, "given up after that"
    failing = StreamingSessions()
    call = failing.plan("t", [1], "r1")
    failing.failed(call)
    assert failing.plan("t", [1, 2], "r2").session_params is None
    assert not failing.forget("t"), "never opened: nothing to close on the engine"


def table() -> tuple[SessionTable, list[float]]:
    now = [0.0]
    sessions = SessionTable(bos_token_id=None, clock=lambda: now[0])
    sessions.open(OpenSessionRequest(session_id="s", streaming=False, timeout=10), "unused")
    return sessions, now


def test_the_engine_builds_a_continued_prompt_as_sglang_does():
    sessions, now = table()
    first = sessions.begin(SessionParams(id="s"), [1, 2, 3], "r1")
    sessions.end(first, [4, 5])
    continued = sessions.begin(SessionParams(id="s", rid="r1"), [6], "a")
    assert continued.prompt == [1, 2, 3, 4, 5, 6]
    dropped = sessions.begin(SessionParams(id="s", rid="r1", drop_previous_output=True), [6], "b")
    assert dropped.prompt == [1, 2, 3, 6]
    assert sessions.begin(SessionParams(id="s", rid="r1", offset=2), [6], "c").prompt == [1, 2, 6]
    assert sessions.begin(SessionParams(id="s", rid="r1", offset=-1), [6], "d").prompt == [1, 2, 3, 4, 6]
    with pytest.raises(RequestError, match="hasn't finished"):
        sessions.begin(SessionParams(id="s", rid="a"), [7], "e")
    with pytest.raises(RequestError, match="replace is not supported"):
        sessions.begin(SessionParams(id="s", rid="r1", replace=True), [7], "f")
    with pytest.raises(RequestError, match="is not open"):
        sessions.begin(SessionParams(id="other", rid="r1"), [7], "g")
    sessions.end(continued, [8])
    with pytest.raises(RequestError, match="not the last finished request"):
        sessions.begin(SessionParams(id="s", rid="r1"), [9], "h")
    assert sessions.begin(SessionParams(id="s", rid="a"), [9], "i").prompt == [1, 2, 3, 4, 5, 6, 8, 9]
    with pytest.raises(RequestError, match="already open"):
        sessions.open(OpenSessionRequest(session_id="s"), "unused")
    streaming = SessionTable(bos_token_id=None)
    streaming.open(OpenSessionRequest(session_id="live", streaming=True), "unused")
    running = streaming.begin(SessionParams(id="live"), [1], "r1")
    with pytest.raises(RequestError, match="already has an active request"):
        streaming.begin(SessionParams(id="live", rid="r1"), [2], "r2")
    streaming.end(running, [2])
    with pytest.raises(RequestError, match="do not support offset"):
        streaming.begin(SessionParams(id="live", rid="r1", offset=1), [3], "r3")


def test_an_idle_session_past_its_timeout_is_closed():
    sessions, now = table()
    sessions.end(sessions.begin(SessionParams(id="s"), [1, 2], "r1"), [3])
    now[0] = 11.0
    with pytest.raises(RequestError, match="is not open"):
        sessions.begin(SessionParams(id="s", rid="r1"), [4], "r2")
    assert sessions.open_sessions == 0


def counters(url: str) -> tuple[float, float]:
    text = httpx.get(f"{url}/metrics").text
    return (
        sample(text, "roost_engine_session_continued_requests_total") or 0.0,
        sample(text, "roost_engine_session_sent_tokens_total") or 0.0,
    )


async def turn(client: SGLangClient, prompt: list[int], session: str, *, stream: bool):
    """One call; (output ids, logprobs, prompt tokens, rid)."""
    if not stream:
        got = await client.generate(prompt, GREEDY, session=session)
        return got.output_ids, got.output_logprobs, got.prompt_tokens, got.meta_info["id"]
    ids, logprobs = [], []
    async for delta in client.generate_stream(prompt, GREEDY, session=session):
        ids += delta.output_ids
        logprobs += delta.output_logprobs
    return ids, logprobs, len(prompt), None


async def test_a_conversation_in_a_streaming_session_answers_as_whole_prompts_do(engine_url):
    before = counters(engine_url)
    async with (
        SGLangClient(engine_url, sessions=SessionMode.STREAMING) as streaming,
        SGLangClient(engine_url) as plain,
    ):
        prompt: list[int] = []
        for n, new in enumerate(TURNS):
            prompt = prompt + new
            ids, logprobs, prompt_tokens, rid = await turn(streaming, prompt, "conv-1", stream=n == 1)
            want = await plain.generate(prompt, GREEDY)
            assert ids == want.output_ids and prompt_tokens == len(prompt)
            # the plain call may reuse the session call's cached prompt: logprobs within fp32 noise
            assert logprobs == pytest.approx(want.output_logprobs, abs=1e-5)
            prompt = prompt + ids
        after = counters(engine_url)
        assert after[0] - before[0] == 2, "turns 2 and 3 continued the session's last request"
        assert after[1] - before[1] == len(TURNS[1]) + len(TURNS[2]), "and sent only their new tokens"
        forked = prompt[:30] + [700, 701]
        ids, _, _, _ = await turn(streaming, forked, "conv-1", stream=False)
        assert ids == (await plain.generate(forked, GREEDY)).output_ids
        assert counters(engine_url)[0] == after[0], "a fork goes plain"
        together = await asyncio.gather(*(turn(streaming, prompt + [800 + i], "conv-1", stream=False) for i in (0, 1)))
        for i, (ids, _, prompt_tokens, _) in enumerate(together):
            assert ids == (await plain.generate(prompt + [800 + i], GREEDY)).output_ids
            assert prompt_tokens == len(prompt) + 1
        assert counters(engine_url)[0] == after[0] + 1, "of two calls at once, one continued the session"
        await streaming.close_session("conv-1")
    late = {"input_ids": [1], "sampling_params": GREEDY, "session_params": {"id": "conv-1", "rid": rid}}
    refused = httpx.post(f"{engine_url}/generate", json=late, timeout=30)
    assert refused.status_code == 400 and "is not open" in refused.text, "closing freed the session"


def test_the_gateway_sends_an_sglang_engines_calls_in_streaming_sessions(engine_url, tmp_path):
    gateway = start_gateway(engine_url, tmp_path / "t.sqlite", backend="sglang", sglang_sessions=True)
    try:
        session = new_session(gateway, group_id="streaming")
        before = counters(engine_url)
        messages = [{"role": "user", "content": "Count with me."}]
        for n in range(3):
            answer = httpx.post(
                f"{session['base_url']}/chat/completions",
                headers=bearer(session["key"]),
                json={"model": "tiny", "messages": messages, **say(f"Number {n}.")},
                timeout=60,
            ).json()
            messages += [answer["choices"][0]["message"], {"role": "user", "content": "Next."}]
        assert counters(engine_url)[0] - before[0] == 2, "each later turn continued the one before"
        opened = sample(httpx.get(f"{engine_url}/metrics").text, "roost_engine_open_sessions")
        sid = session["session_id"]
        finish = httpx.post(f"{gateway.url}/sessions/{sid}/finish", json={}, headers=bearer(gateway.admin_key))
        assert finish.status_code == 200, finish.text
        closed = sample(httpx.get(f"{engine_url}/metrics").text, "roost_engine_open_sessions")
        assert closed == opened - 1, "finishing the session closed it on the engine"
    finally:
        gateway.stop()
