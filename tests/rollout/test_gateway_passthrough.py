"""The `openai` backend passes calls through to an OpenAI-compatible server (here a second
roost gateway) and records text, and token ids where that server returns them."""

from __future__ import annotations

import json

import openai
import pytest

from roost.tests.rollout.gateway_helpers import (
    THINK, TOOL_CALL, WEATHER_TOOLS, EngineSpy, new_session, say, start_gateway, stored_calls,
)
from roost.rollout.store.reader import TrajectoryReader


@pytest.fixture(scope="module")
def chain(scripted_engine_url, tmp_path_factory):
    root = tmp_path_factory.mktemp("passthrough")
    with EngineSpy(scripted_engine_url) as spy:
        inner = start_gateway(spy.url, root / "inner.sqlite")
        outer_ids = start_gateway(f"{inner.url}/v1", root / "outer.sqlite", backend="openai", model=None,
                                  upstream_token_ids=True, served_model_name="tiny")
        outer_text = start_gateway(f"{inner.url}/v1", root / "outer-text.sqlite", backend="openai", model=None)
        yield inner, outer_ids, outer_text, root
        for server in (outer_text, outer_ids, inner):
            server.stop()


def _turn(client, messages, reply, stream):
    kwargs = dict(model="tiny", messages=messages, tools=WEATHER_TOOLS, extra_body=say(reply))
    if not stream:
        return client.chat.completions.create(**kwargs).choices[0].message.model_dump(exclude_none=True)
    content, calls = "", {}
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for c in delta.tool_calls or ():
            calls.setdefault(c.index, {"id": c.id, "type": "function", "function": {"name": c.function.name,
                                                                                    "arguments": c.function.arguments}})
    message = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = list(calls.values())
    return message


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_passthrough_records_text_and_token_ids(chain, stream):
    inner, outer, _, root = chain
    session = new_session(outer, group_id="pt")
    client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"])
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    first = _turn(client, messages, THINK + TOOL_CALL, stream)
    assert json.loads(first["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    messages += [first, {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": "sunny"}]
    second = _turn(client, messages, "Sunny.", stream)
    assert second["content"] == "Sunny."
    calls = stored_calls(root / "outer.sqlite", session["session_id"])
    assert [c.backend for c in calls] == ["openai", "openai"]
    assert [c.kind for c in calls] == ["root", "extend"]
    assert calls[0].response["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert calls[1].request["messages"][-1]["content"] == "sunny"
    # The ids the outer gateway recorded are the ids the inner one recorded (and sent the engine).
    with TrajectoryReader(root / "inner.sqlite") as reader:
        inner_calls = [c for s in reader.sessions() for c in reader.calls(s.session_id)]
    by_prompt = {tuple(c.prompt_ids): c for c in inner_calls}
    for call in calls:
        match = by_prompt[tuple(call.prompt_ids)]
        assert list(match.sampled_ids) == list(call.sampled_ids)


def test_passthrough_without_token_ids_records_text(chain):
    _, _, outer_text, root = chain
    session = new_session(outer_text)
    client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"])
    reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                           extra_body=say("Hello."))
    assert reply.choices[0].message.content == "Hello."
    [call] = stored_calls(root / "outer-text.sqlite", session["session_id"])
    assert call.kind == "text" and len(call.prompt_ids) == 0
    assert call.response["message"]["content"] == "Hello."
    unknown = client.with_options(max_retries=0)
    with pytest.raises(openai.NotFoundError):
        unknown.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
