"""The `openai` backend passes calls through to an OpenAI-compatible server (here a second
roost gateway, or a hosted-API-like server in front of one) and records text, and the token
ids and logprobs that server returns; what it does not return is recorded as absent and is
not training data."""

from __future__ import annotations

import json

import httpx
import openai
import orjson
import pytest
from aiohttp import web

from roost.rollout.keys import bearer
from roost.rollout.store.export import export
from roost.rollout.store.paths import iter_training_samples
from roost.rollout.store.reader import TrajectoryReader
from roost.rollout.store.samples import Refused
from roost.tests.rollout.gateway_helpers import (
    THINK,
    TOOL_CALL,
    WEATHER_TOOLS,
    EngineSpy,
    new_session,
    say,
    start_gateway,
    stored_calls,
)


class HostedAPI(EngineSpy):
    """An OpenAI-compatible server in front of a roost gateway that returns no logprobs, as
    some hosted APIs and local servers do. Under `/hosted/` it also refuses parameters it does
    not know, as OpenAI's API does (400 for `return_token_ids`); under `/ids/` it returns token
    ids. It remembers the bodies it was sent."""

    def __init__(self, gateway_url: str):
        super().__init__(gateway_url)
        self.bodies: list[dict] = []

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        mode, _, path = request.path.lstrip("/").partition("/")
        body = orjson.loads(await request.read()) if request.method == "POST" else None
        if body is not None:
            self.bodies.append(dict(body))
        if mode == "hosted" and body is not None and "return_token_ids" in body:
            return web.json_response(
                {
                    "error": {
                        "message": "Unrecognized request argument supplied: return_token_ids",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": None,
                    }
                },
                status=400,
            )
        async with self._http.request(request.method, f"{self.engine_url}/{path}", json=body) as up:
            if not up.headers.get("content-type", "").startswith("text/event-stream"):
                answer = await up.json()
                return web.json_response(_without_logprobs(answer), status=up.status)
            out = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await out.prepare(request)
            async for line in up.content:
                if line.startswith(b"data: {"):
                    line = b"data: " + orjson.dumps(_without_logprobs(orjson.loads(line[6:]))) + b"\n\n"
                await out.write(line)
            await out.write_eof()
            return out


def _without_logprobs(answer: dict) -> dict:
    for choice in answer.get("choices") or ():
        choice["logprobs"] = None
    return answer


@pytest.fixture(scope="module")
def chain(scripted_engine_url, tmp_path_factory):
    root = tmp_path_factory.mktemp("passthrough")
    with EngineSpy(scripted_engine_url) as spy:
        inner = start_gateway(spy.url, root / "inner.sqlite")
        with HostedAPI(inner.url) as hosted:
            outer = start_gateway(
                f"{inner.url}/v1", root / "outer.sqlite", backend="openai", model=None, served_model_name="tiny"
            )
            outer_hosted = start_gateway(
                f"{hosted.url}/hosted/v1", root / "hosted.sqlite", backend="openai", model=None
            )
            outer_ids = start_gateway(f"{hosted.url}/ids/v1", root / "ids.sqlite", backend="openai", model=None)
            yield inner, outer, outer_hosted, outer_ids, hosted, root
            for server in (outer_ids, outer_hosted, outer, inner):
                server.stop()


def _turn(client, messages, reply, stream):
    kwargs = dict(model="tiny", messages=messages, tools=WEATHER_TOOLS, extra_body=say(reply))
    if not stream:
        answer = client.chat.completions.create(**kwargs)
        # The gateway asked upstream for logprobs and ids; the harness, which did not, gets none.
        assert answer.choices[0].logprobs is None and "token_ids" not in (answer.choices[0].model_extra or {})
        return answer.choices[0].message.model_dump(exclude_none=True)
    content, calls = "", {}
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        assert chunk.choices[0].logprobs is None and "prompt_token_ids" not in (chunk.model_extra or {})
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for c in delta.tool_calls or ():
            calls.setdefault(
                c.index,
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                },
            )
    message = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = list(calls.values())
    return message


def _finish(server, session: dict) -> None:
    url = f"{server.url}/sessions/{session['session_id']}"
    httpx.post(f"{url}/reward", json={"reward": 1.0}, headers=bearer(server.admin_key)).raise_for_status()
    httpx.post(f"{url}/finish", json={}, headers=bearer(server.admin_key)).raise_for_status()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_passthrough_records_token_ids_and_logprobs(chain, stream):
    inner, outer, _, _, _, root = chain
    session = new_session(outer, group_id="pt")
    client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"])
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    first = _turn(client, messages, THINK + TOOL_CALL, stream)
    assert json.loads(first["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    messages += [first, {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": "sunny"}]
    second = _turn(client, messages, "Sunny.", stream)
    assert second["content"] == "Sunny."
    calls = stored_calls(root / "outer.sqlite", session["session_id"])
    assert [(c.backend, c.endpoint, c.kind) for c in calls] == [
        ("openai", "chat", "root"),
        ("openai", "chat", "extend"),
    ]
    assert calls[0].response["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert calls[1].request["messages"][-1]["content"] == "sunny"
    # The ids and logprobs the outer gateway recorded are those the inner one recorded (and
    # got from the engine), streamed or not.
    with TrajectoryReader(root / "inner.sqlite") as reader:
        by_prompt = {tuple(c.prompt_ids): c for s in reader.sessions() for c in reader.calls(s.session_id)}
    for call in calls:
        match = by_prompt[tuple(call.prompt_ids)]
        assert list(match.sampled_ids) == list(call.sampled_ids)
        assert list(match.sampled_logprobs) == list(call.sampled_logprobs) and len(call.sampled_logprobs) > 0
        assert call.untrainable is None
    _finish(outer, session)
    refused: list[Refused] = []
    [sample] = iter_training_samples(root / "outer.sqlite", session_ids=[session["session_id"]], refused=refused)
    assert refused == [] and sample.call_ids == [c.call_id for c in calls]


def test_passthrough_gives_the_harness_the_logprobs_and_ids_it_asks_for(chain):
    _, outer, _, _, _, root = chain
    session = new_session(outer)
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "logprobs": True,
        "return_token_ids": True,
        **say("Hello."),
    }
    answer = httpx.post(f"{session['base_url']}/chat/completions", json=body, headers=bearer(session["key"])).json()
    [call] = stored_calls(root / "outer.sqlite", session["session_id"])
    choice = answer["choices"][0]
    assert choice["token_ids"] == list(call.sampled_ids) and answer["prompt_token_ids"] == list(call.prompt_ids)
    assert [e["logprob"] for e in choice["logprobs"]["content"]] == list(call.sampled_logprobs)


def test_an_upstream_without_token_ids_is_recorded_as_text_and_not_trained_on(chain):
    _, _, outer_hosted, _, hosted, root = chain
    session = new_session(outer_hosted, group_id="hosted")
    client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"])
    for text in ("Hello.", "Again."):
        reply = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], extra_body=say(text)
        )
        assert reply.choices[0].message.content == text
    # It refused return_token_ids once; the gateway asked again without it, and never again.
    asked = [("return_token_ids" in b, b.get("logprobs")) for b in hosted.bodies if b.get("messages")]
    assert asked[-3:] == [(True, True), (False, True), (False, True)]
    calls = stored_calls(root / "hosted.sqlite", session["session_id"])
    assert [(c.endpoint, c.kind) for c in calls] == [("chat", "text"), ("chat", "text")]
    assert all(len(c.prompt_ids) == len(c.sampled_ids) == len(c.sampled_logprobs) == 0 for c in calls)
    assert calls[0].response["message"]["content"] == "Hello."
    assert "no token ids" in calls[0].untrainable
    _finish(outer_hosted, session)
    refused: list[Refused] = []
    assert (
        list(iter_training_samples(root / "hosted.sqlite", session_ids=[session["session_id"]], refused=refused)) == []
    )
    assert [r.call_id for r in refused] == [c.call_id for c in calls]
    assert "no token ids" in refused[0].message() and "--backend vllm" in refused[0].message()


def test_an_upstream_without_logprobs_records_none_and_its_paths_are_refused(chain, tmp_path):
    _, _, _, outer_ids, _, root = chain
    session = new_session(outer_ids, group_id="ids")
    client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"])
    messages = [{"role": "user", "content": "hi"}]
    first = client.chat.completions.create(model="tiny", messages=messages, extra_body=say("Hello."))
    messages += [first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "more"}]
    streamed = client.chat.completions.create(model="tiny", messages=messages, extra_body=say("More."), stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == "More."
    calls = stored_calls(root / "ids.sqlite", session["session_id"])
    assert [c.kind for c in calls] == ["root", "extend"]  # the ids keep the token tree's links
    # No logprob came back: none is stored (no 0.0 standing in), and the record says why.
    assert all(len(c.sampled_ids) > 0 and len(c.sampled_logprobs) == 0 for c in calls)
    assert "no logprob" in calls[1].untrainable
    _finish(outer_ids, session)
    refused: list[Refused] = []
    out = tmp_path / "samples.jsonl"
    assert export(root / "ids.sqlite", out, kind="samples", group_id="ids", refused=refused) == 0
    assert [r.call_id for r in refused] == [c.call_id for c in calls]  # both calls on the one path
    export(root / "ids.sqlite", out, kind="calls", group_id="ids")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["untrainable"] is not None for r in rows] == [True, True] and rows[0]["sampled_logprobs"] == []


def test_unknown_model_is_the_upstreams_404(chain):
    _, outer, _, _, _, _ = chain
    session = new_session(outer)
    client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"], max_retries=0)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
