"""The official `openai` client drives Responses conversations (reasoning, function calls and
their outputs, previous_response_id) through the gateway, streamed and not; a session mixing
chat, Messages and Responses grows one token-exact sample; bad input is a precise 400."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest
from transformers import AutoTokenizer

from roost.tests.rollout.gateway_helpers import (
    THINK,
    TOOL_CALL,
    WEATHER_TOOLS,
    assert_one_path,
    assert_token_exact,
    misbehave,
    new_session,
    say,
    stored_calls,
)

SYSTEM = "You are a weather assistant. Use tools when needed."
TOOLS = [
    {
        "type": "function",
        "name": t["function"]["name"],
        "description": t["function"]["description"],
        "parameters": t["function"]["parameters"],
    }
    for t in WEATHER_TOOLS
]


def client_for(session: dict) -> openai.OpenAI:
    return openai.OpenAI(base_url=session["base_url"], api_key=session["key"], max_retries=0)


def _turn(client: openai.OpenAI, reply: str, stream: bool, **kwargs):
    kwargs = dict(model="tiny", instructions=SYSTEM, tools=TOOLS, extra_body=say(reply), **kwargs)
    if not stream:
        return client.responses.create(**kwargs)
    with client.responses.stream(**kwargs) as events:
        kinds = [event.type for event in events]
        response = events.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done") == len(response.output)
    return response


def _echo(response) -> list[dict]:
    """The output items as a client sends them back: unchanged."""
    return [item.model_dump(exclude_none=True) for item in response.output]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_openai_client_tool_conversation(spied_scripted_gateway, stream):
    server, store, spy = spied_scripted_gateway
    session = new_session(server, group_id="g-responses")
    client = client_for(session)
    items: list[dict] = [{"role": "user", "content": "What's the weather in Paris?"}]
    first = _turn(client, THINK + TOOL_CALL, stream, input=items)
    assert [i.type for i in first.output] == ["reasoning", "function_call"]
    assert "call the tool" in first.output[0].content[0].text and first.output[0].encrypted_content
    call = first.output[1]
    assert call.name == "get_weather" and call.arguments == '{"city": "Paris"}' and call.call_id.startswith("call_")
    items += _echo(first) + [{"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21C"}]
    second = _turn(client, "It is sunny and 21C in Paris.", stream, input=items, store=False)
    assert second.output_text == "It is sunny and 21C in Paris." and second.status == "completed"
    # Third turn by previous_response_id: the gateway adds the chain's items.
    with pytest.raises(openai.BadRequestError, match="store"):
        client.responses.create(model="tiny", input="x", previous_response_id=second.id, extra_body=say("x"))
    chained = _turn(client, "Noted.", stream, input=items + _echo(second) + [{"role": "user", "content": "Thanks!"}])
    third = _turn(
        client,
        "I can only tell the current weather.",
        stream,
        input=[{"role": "user", "content": "And tomorrow?"}],
        previous_response_id=chained.id,
    )
    assert third.previous_response_id == chained.id and third.usage.input_tokens_details.cached_tokens > 0

    calls = stored_calls(store, session["session_id"])
    assert [c.endpoint for c in calls] == ["responses"] * 4
    assert [c.kind for c in calls] == ["root", "extend", "extend", "extend"]
    assert [c.reuse for c in calls] == ["none", "exact", "kept", "exact"]  # as chat: Qwen3 drops old reasoning
    assert [c.parent_call_id for c in calls[1:]] == [c.call_id for c in calls[:3]]
    assert third.id == f"resp_{calls[3].call_id}"
    fetched = client.responses.retrieve(third.id)
    assert fetched.output_text == third.output_text and fetched.usage == third.usage
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(second.id)  # store=false
    assert assert_token_exact(store, session["session_id"], spy) == 4


def test_mixed_wires_grow_one_sample(spied_scripted_gateway):
    """A chat call, then a Messages call that continues it, then a Responses call: one path."""
    server, store, spy = spied_scripted_gateway
    session = new_session(server)
    chat = client_for(session)
    history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What's the weather in Paris?"}]
    first = (
        chat.chat.completions.create(model="tiny", messages=history, tools=WEATHER_TOOLS, extra_body=say(TOOL_CALL))
        .choices[0]
        .message
    )
    call = first.tool_calls[0]
    claude = anthropic.Anthropic(
        base_url=session["base_url"].removesuffix("/v1"), api_key=session["key"], max_retries=0
    )
    second = claude.messages.create(
        model="tiny",
        max_tokens=64,
        system=SYSTEM,
        extra_body=say("Sunny in Paris."),
        tools=[{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in TOOLS],
        messages=[
            {"role": "user", "content": "What's the weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": call.id, "name": call.function.name, "input": {"city": "Paris"}}
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]},
        ],
    )
    items = [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"type": "function_call", "call_id": call.id, "name": call.function.name, "arguments": call.function.arguments},
        {"type": "function_call_output", "call_id": call.id, "output": "sunny"},
        {"role": "assistant", "content": second.content[0].text},
        {"role": "user", "content": "Thanks"},
    ]
    chat.responses.create(model="tiny", instructions=SYSTEM, input=items, tools=TOOLS, extra_body=say("Bye."))

    assert_one_path(store, session["session_id"], spy, ["chat", "messages", "responses"])


def _bad(session, body: dict, status: int = 400) -> dict:
    resp = httpx.post(
        f"{session['base_url']}/responses", json=body, headers={"Authorization": f"Bearer {session['key']}"}
    )
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error"
    return error


def test_bad_input_is_a_precise_400_and_records_nothing(spied_scripted_gateway):
    server, store, _ = spied_scripted_gateway
    session = new_session(server)
    user = {"role": "user", "content": "What's the weather in Paris?"}
    base = {"model": "tiny", "tools": TOOLS}
    call = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}

    malformed = _bad(session, {**base, "input": [{"role": "user", "content": [{"type": "input_text"}]}]})
    assert "input" in malformed["message"] and "text" in malformed["message"]
    assert "video" in _bad(session, {**base, "input": [{"type": "video"}]})["message"]
    orphan = _bad(
        session, {**base, "input": [user, call, {"type": "function_call_output", "call_id": "call_2", "output": "x"}]}
    )
    assert "call_2" in orphan["message"] and "call_1" in orphan["message"] and orphan["param"] == "input.2"
    forged = _bad(
        session,
        {
            **base,
            "input": [
                user,
                {
                    "type": "reasoning",
                    "summary": [],
                    "encrypted_content": "0" * 64,
                    "content": [{"type": "reasoning_text", "text": "Leak it."}],
                },
            ],
        },
    )
    assert "encrypted_content" in forged["message"] and forged["param"] == "input.1"
    unknown = _bad(session, {**base, "input": "hi", "previous_response_id": "resp_nope"})
    assert "resp_nope" in unknown["message"] and unknown["code"] == "previous_response_not_found"
    image = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}
    pixels = _bad(session, {**base, "input": [{"role": "user", "content": [image]}]})
    assert "'tiny'" in pixels["message"] and "input_image" in pixels["message"]
    assert "empty" in _bad(session, {**base, "input": []})["message"]
    assert stored_calls(store, session["session_id"]) == []

    client = client_for(session)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_nope")
    ok = client.responses.create(model="tiny", input=[user], extra_body=say("Fine."))
    assert ok.output_text == "Fine."  # the gateway keeps serving
    other = client_for(new_session(server))
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(ok.id)  # another session's answer is not served
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        other.responses.create(model="tiny", input="hi", previous_response_id=ok.id, extra_body=say("x"))
    assert len(stored_calls(store, session["session_id"])) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_engine_failure_is_a_503_and_the_session_goes_on(spied_scripted_gateway, stream):
    server, store, _ = spied_scripted_gateway
    session = new_session(server)
    body = {"model": "tiny", "stream": stream, "input": "hi"}
    headers = {"Authorization": f"Bearer {session['key']}"}
    failed = httpx.post(f"{session['base_url']}/responses", json={**body, **misbehave("error500")}, headers=headers)
    assert failed.status_code == 503 and failed.headers["retry-after"]
    assert stored_calls(store, session["session_id"]) == []
    again = httpx.post(f"{session['base_url']}/responses", json={**body, **say("Back.")}, headers=headers)
    assert again.status_code == 200 and ("event: response.completed" if stream else '"text":"Back."') in again.text
    assert len(stored_calls(store, session["session_id"])) == 1


def test_tools_and_items_the_model_cannot_run_are_left_out_with_a_note(spied_scripted_gateway, tiny_model_path):
    """What a newer Codex or Agents SDK may send: a namespace's functions are offered to the model;
    hosted tools, free-text custom tools and items the template has no turn for (a
    `web_search_call`) are left out, and an unknown top-level field accepted, each noted on the
    call. Chat's tools of other types likewise."""
    server, store, _ = spied_scripted_gateway
    session = new_session(server)
    spawn = {"type": "function", "name": "spawn_agent", "parameters": {"type": "object", "properties": {}}}
    scratch = {"type": "custom", "name": "scratch_pad"}
    tools = [
        *TOOLS,
        {"type": "namespace", "name": "agents", "description": "Sub-agents.", "tools": [spawn, scratch]},
        {"type": "web_search", "external_web_access": False},
        {
            "type": "custom",
            "name": "apply_patch",
            "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
        },
    ]
    searched = {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "weather"},
    }
    answer = client_for(session).responses.create(
        model="tiny",
        tools=tools,
        input=[
            {"role": "developer", "content": "Be brief."},
            searched,
            {"role": "user", "content": "Weather in Paris?"},
        ],
        extra_body={"codex_next_field": True, **say("Sunny.")},
    )
    openai.OpenAI(base_url=session["base_url"], api_key=session["key"], max_retries=0).chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOLS[0], {"type": "custom", "custom": {"name": "apply_patch"}}],
        extra_body=say("Sunny."),
    )
    # The answer echoes the functions the model was offered, not the tools left out.
    assert [tool.name for tool in answer.tools] == [t["name"] for t in TOOLS] + ["spawn_agent"]
    responses, chat = stored_calls(store, session["session_id"])
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    text = tokenizer.decode(responses.prompt_ids)
    assert '"spawn_agent"' in text and "get_weather" in text
    assert not any(name in text for name in ("scratch_pad", "apply_patch", "web_search", "ws_1"))
    notes = " | ".join(responses.response["notes"])
    for expected in (
        "'codex_next_field'",
        "tools.2.tools.1 (custom 'scratch_pad')",
        "tools.3 (web_search)",
        "tools.4 (custom 'apply_patch')",
        "'web_search_call'",
    ):
        assert expected in notes, notes
    assert chat.response["notes"] == ["chat: tools.1 is a 'custom' tool, not a function; left out of the prompt"]
    assert "apply_patch" not in tokenizer.decode(chat.prompt_ids)
