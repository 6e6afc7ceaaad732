"""The official openai client and litellm drive multi-turn tool-calling conversations
through the gateway, streamed and not; every stored call is token-exact."""

from __future__ import annotations

import json
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network here: use the bundled map

import litellm  # noqa: E402
import openai  # noqa: E402
import pytest  # noqa: E402

from roost.tests.rollout.gateway_helpers import (
    THINK,
    TOOL_CALL,
    WEATHER_TOOLS,
    EngineSpy,
    assert_token_exact,
    new_session,
    say,
    start_gateway,
    stored_calls,
)

# litellm's own TypedDicts trip a pydantic warning on import; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SYSTEM = {"role": "system", "content": "You are a weather assistant. Use tools when needed."}


@pytest.fixture(scope="module")
def spy(scripted_engine_url):
    with EngineSpy(scripted_engine_url) as spy:
        yield spy


@pytest.fixture(scope="module")
def gateway(spy, tmp_path_factory):
    store = tmp_path_factory.mktemp("store") / "trajectories.sqlite"
    server = start_gateway(spy.url, store)
    yield server, store
    server.stop()


def _openai_turn(client, messages, reply, stream):
    kwargs = dict(model="tiny", messages=messages, tools=WEATHER_TOOLS, extra_body=say(reply))
    if not stream:
        return client.chat.completions.create(**kwargs).choices[0].message.model_dump(exclude_none=True)
    message = {"role": "assistant", "content": "", "reasoning_content": ""}
    calls: dict[int, dict] = {}
    for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs):
        if not chunk.choices:
            assert chunk.usage.completion_tokens > 0
            continue
        delta = chunk.choices[0].delta
        message["content"] += delta.content or ""
        message["reasoning_content"] += (delta.model_extra or {}).get("reasoning_content") or ""
        for call in delta.tool_calls or ():
            slot = calls.setdefault(
                call.index, {"id": call.id, "type": "function", "function": {"name": "", "arguments": ""}}
            )
            slot["function"]["name"] += call.function.name or ""
            slot["function"]["arguments"] += call.function.arguments or ""
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def _conversation(turn) -> list[dict]:
    """Three calls: tool call (with reasoning), answer from the tool result, a follow-up."""
    messages = [SYSTEM, {"role": "user", "content": "What's the weather in Paris?"}]
    first = turn(messages, THINK + TOOL_CALL)
    assert first["tool_calls"][0]["function"]["name"] == "get_weather"
    assert json.loads(first["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert "call the tool" in first["reasoning_content"]
    assert not first.get("content")
    messages += [first, {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": "sunny, 21C"}]
    second = turn(messages, "It is sunny and 21C in Paris.")
    assert second["content"] == "It is sunny and 21C in Paris."
    messages += [second, {"role": "user", "content": "Thanks! And tomorrow?"}]
    third = turn(messages, "I can only tell the current weather.")
    assert third["content"] == "I can only tell the current weather."
    return messages


def _check_tree(store, session_id):
    calls = stored_calls(store, session_id)
    assert [c.kind for c in calls] == ["root", "extend", "extend"]
    # Within a tool chain Qwen3's template keeps the reasoning (exact); after a new user
    # message it drops it, and the default policy `keep` keeps the sampled tokens.
    assert [c.reuse for c in calls] == ["none", "exact", "kept"]
    for parent, child in zip(calls, calls[1:]):
        path = list(parent.prompt_ids) + list(parent.sampled_ids)
        assert child.parent_call_id == parent.call_id
        assert list(child.prompt_ids[: len(path)]) == path
    assert calls[0].finish_reason["type"] == "stop"
    assert calls[0].response["finish_reason"] == "tool_calls"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_openai_client_tool_conversation(gateway, spy, stream):
    server, store = gateway
    session = new_session(server, group_id="g-openai", task={"id": "weather"})
    client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"])
    _conversation(lambda messages, reply: _openai_turn(client, messages, reply, stream))
    _check_tree(store, session["session_id"])
    assert assert_token_exact(store, session["session_id"], spy) == 3


def _litellm_turn(base_url, key, messages, reply, stream):
    kwargs = dict(
        model="openai/tiny",
        api_base=base_url,
        api_key=key,
        messages=messages,
        tools=WEATHER_TOOLS,
        extra_body=say(reply),
    )
    if not stream:
        message = litellm.completion(**kwargs).choices[0].message
    else:
        chunks = list(litellm.completion(stream=True, **kwargs))
        message = litellm.stream_chunk_builder(chunks, messages=messages).choices[0].message
    out = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls
        ]
    out["reasoning_content"] = getattr(message, "reasoning_content", None) or ""
    return out


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_litellm_tool_conversation(gateway, spy, stream):
    server, store = gateway
    session = new_session(server, group_id="g-litellm")
    _conversation(lambda messages, reply: _litellm_turn(session["base_url"], session["key"], messages, reply, stream))
    _check_tree(store, session["session_id"])
    assert assert_token_exact(store, session["session_id"], spy) == 3


def test_bearer_session_key_on_plain_v1(gateway, spy):
    server, store = gateway
    session = new_session(server)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=session["key"])
    reply = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], extra_body=say("Hello!")
    )
    assert reply.choices[0].message.content == "Hello!"
    calls = stored_calls(store, session["session_id"])
    assert len(calls) == 1 and reply.id == f"chatcmpl-{calls[0].call_id}"


def test_text_completions_with_token_ids(gateway, spy):
    server, store = gateway
    session = new_session(server)
    client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"])
    first = client.completions.create(
        model="tiny",
        prompt="Once upon a time",
        max_tokens=8,
        extra_body={**say(" there was a fox."), "return_token_ids": True},
    )
    ids = first.model_extra["prompt_token_ids"] + first.choices[0].model_extra["token_ids"]
    chunks = list(
        client.completions.create(
            model="tiny", prompt=ids + [13], max_tokens=8, stream=True, extra_body=say(" The end.")
        )
    )
    assert "".join(c.choices[0].text for c in chunks) == " The end."
    calls = stored_calls(store, session["session_id"])
    assert [c.kind for c in calls] == ["root", "extend"]
    assert list(calls[1].prompt_ids) == ids + [13]
    assert_token_exact(store, session["session_id"], spy)


def test_logprobs_and_n(gateway, spy):
    server, store = gateway
    session = new_session(server)
    client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"])
    reply = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], n=2, logprobs=True, extra_body=say("Hi there")
    )
    assert len(reply.choices) == 2
    calls = stored_calls(store, session["session_id"])
    assert len(calls) == 2
    tokens = reply.choices[0].logprobs.content
    assert [t.logprob for t in tokens] == pytest.approx(list(calls[0].sampled_logprobs))


def test_logprobs_streamed_and_of_text_completions(gateway):
    # A stream carries them on its last chunk; text completions' `logprobs: 0` asks for them
    # (the sampled tokens' own, as OpenAI and vLLM read it).
    server, store = gateway
    session = new_session(server)
    client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"])
    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "hi"}],
            logprobs=True,
            stream=True,
            extra_body=say("Hi there"),
        )
    )
    streamed = [t.logprob for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    text = client.completions.create(
        model="tiny", prompt="Once", logprobs=0, max_tokens=4, extra_body=say(" upon a time")
    )
    chat_call, text_call = stored_calls(store, session["session_id"])
    assert streamed == pytest.approx(list(chat_call.sampled_logprobs)) and streamed
    assert text.choices[0].logprobs.token_logprobs == pytest.approx(list(text_call.sampled_logprobs))
