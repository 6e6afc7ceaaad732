"""Structured outputs through the gateway, on the real engine with the tiny model at temperature 1
and many seeds: response_format replies parse and validate, an enforced tool_choice always
yields a tool call, allowed_replies only ever returns one of them, the stored call names its
constraint, its logprobs are the model's own, and a request a backend cannot honour is a 400."""

from __future__ import annotations

import asyncio
import json

import httpx
import jsonschema
import pytest
import torch
from transformers import AutoModelForCausalLM

from roost.rollout.keys import bearer
from roost.tests.rollout.gateway_helpers import new_session, running_gateway, say, start_gateway, stored_calls

SEEDS = range(12)
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "colour": {"enum": ["red", "green", "blue"]},
    },
    "required": ["name", "age", "colour"],
    "additionalProperties": False,
}
MOVE = {
    "type": "object",
    "properties": {"direction": {"enum": ["north", "south"]}, "steps": {"type": "integer", "minimum": 1, "maximum": 9}},
    "required": ["direction", "steps"],
    "additionalProperties": False,
}
NOTHING = {"type": "object", "properties": {}, "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "move", "description": "Walk.", "parameters": MOVE}},
    {"type": "function", "function": {"name": "look", "description": "Look around.", "parameters": NOTHING}},
]
ACTIONS = ["go north", "take key (brass)", "open door.", "look|around"]
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}  # the template closes the block


@pytest.fixture(scope="module")
def gateway(engine_url, tmp_path_factory):
    with running_gateway(engine_url, tmp_path_factory.mktemp("structured") / "trajectories.sqlite") as running:
        yield running


def messages(text: str = "Where now?") -> list[dict]:
    return [{"role": "user", "content": text}]


async def post_all(url: str, key: str, bodies: list[dict]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=300, headers=bearer(key)) as client:
        return list(await asyncio.gather(*(client.post(url, json=b) for b in bodies)))


async def chat_all(gateway, **fields) -> tuple[dict, list[dict]]:
    """One call per seed in a fresh session; the session and each answer's first choice."""
    server, _ = gateway
    session = new_session(server)
    bodies = [
        {"model": "tiny", "messages": messages(), "temperature": 1.0, "seed": s, "max_tokens": 64, **fields}
        for s in SEEDS
    ]
    answers = await post_all(f"{session['base_url']}/chat/completions", session["key"], bodies)
    for answer in answers:
        assert answer.status_code == 200, answer.text
    return session, [a.json()["choices"][0] for a in answers]


async def test_json_schema_replies_parse_and_validate(gateway):
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    session, choices = await chat_all(gateway, response_format=fmt)
    for choice in choices:
        jsonschema.validate(json.loads(choice["message"]["content"]), PERSON)
        assert choice["finish_reason"] == "stop"
    assert len({c["message"]["content"] for c in choices}) > 1
    call = stored_calls(gateway[1], session["session_id"])[0]
    assert json.loads(call.sampling_params["json_schema"]) == PERSON
    assert call.response["constraint"] == {"source": "response_format", "type": "json_schema"}


async def test_json_object_replies_parse(gateway):
    session, choices = await chat_all(gateway, response_format={"type": "json_object"})
    ended = [c for c in choices if c["finish_reason"] == "stop"]
    assert ended
    for choice in ended:
        json.loads(choice["message"]["content"])
    assert stored_calls(gateway[1], session["session_id"])[0].sampling_params["json_schema"] == "$$ANY$$"


async def test_tool_choice_required_always_yields_a_tool_call(gateway):
    session, choices = await chat_all(
        gateway, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, **NO_THINKING
    )
    names = set()
    for choice in choices:
        assert choice["finish_reason"] == "tool_calls", choice
        for call in choice["message"]["tool_calls"]:
            names.add(call["function"]["name"])
            if call["function"]["name"] == "move":
                jsonschema.validate(json.loads(call["function"]["arguments"]), MOVE)
    assert names <= {"move", "look"}
    call = stored_calls(gateway[1], session["session_id"])[0]
    assert call.response["constraint"] == {"source": "tool_choice", "type": "ebnf"}
    assert call.response["parse_failures"] == []


async def test_parallel_calls_start_with_a_whole_call(gateway):
    """With parallel calls allowed the model may keep calling up to max_tokens; the first call is whole."""
    _, choices = await chat_all(gateway, tools=TOOLS, tool_choice="required", **NO_THINKING)
    for choice in choices:
        assert choice["message"]["tool_calls"], choice


async def test_named_tool_choice_calls_that_tool(gateway):
    named = {"type": "function", "function": {"name": "move"}}
    _, choices = await chat_all(gateway, tools=TOOLS, tool_choice=named, parallel_tool_calls=False, **NO_THINKING)
    for choice in choices:
        [call] = choice["message"]["tool_calls"]
        assert call["function"]["name"] == "move"
        jsonschema.validate(json.loads(call["function"]["arguments"]), MOVE)


async def test_allowed_replies_only_ever_returns_one_of_them(gateway):
    session, choices = await chat_all(gateway, allowed_replies=ACTIONS)
    replies = {c["message"]["content"] for c in choices}
    assert replies <= set(ACTIONS) and len(replies) > 1
    call = stored_calls(gateway[1], session["session_id"])[0]
    assert call.response["constraint"] == {"source": "allowed_replies", "type": "regex"}


async def test_allowed_replies_on_text_completions(gateway):
    server, _ = gateway
    session = new_session(server)
    bodies = [
        {
            "model": "tiny",
            "prompt": "You are in a hall. >",
            "temperature": 1.0,
            "seed": s,
            "max_tokens": 32,
            "allowed_replies": ACTIONS,
        }
        for s in SEEDS
    ]
    answers = await post_all(f"{session['base_url']}/completions", session["key"], bodies)
    assert {a.json()["choices"][0]["text"] for a in answers} <= set(ACTIONS)


async def test_anthropic_tool_choice_any_and_tool(gateway):
    server, _ = gateway
    session = new_session(server)
    tools = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS]
    choices = [
        {"type": "any", "disable_parallel_tool_use": True},
        {"type": "tool", "name": "look", "disable_parallel_tool_use": True},
    ]
    bodies = [
        {
            "model": "tiny",
            "max_tokens": 64,
            "messages": messages(),
            "tools": tools,
            "tool_choice": c,
            "temperature": 1.0,
            "thinking": {"type": "disabled"},
        }
        for c in choices
        for _ in range(4)
    ]
    answers = await post_all(f"{session['base_url']}/messages", session["key"], bodies)
    for body, answer in zip(bodies, answers):
        assert answer.status_code == 200, answer.text
        uses = [b for b in answer.json()["content"] if b["type"] == "tool_use"]
        assert uses and answer.json()["stop_reason"] == "tool_use"
        if body["tool_choice"]["type"] == "tool":
            assert {u["name"] for u in uses} == {"look"}


async def test_constrained_logprobs_are_the_models_own(gateway, tiny_model_path):
    """The trainer scores the stored tokens with the plain model: for a constrained call it
    gets the stored logprobs back (the mask changed which token was drawn, not the logprobs)."""
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    session, _ = await chat_all(gateway, response_format=fmt)
    call = stored_calls(gateway[1], session["session_id"])[0]
    prompt, sampled = list(call.prompt_ids), list(call.sampled_ids)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + sampled])).logits[0]
    scored = torch.log_softmax(logits, -1)[len(prompt) - 1 : -1].gather(1, torch.tensor(sampled)[:, None])[:, 0]
    recorded = torch.tensor(list(call.sampled_logprobs))
    assert (recorded - scored).abs().max().item() <= 1e-5
    assert recorded.min().item() < -5  # a renormalised (masked) distribution would give forced tokens ~0


BAD = [
    ({"response_format": {"type": "xml"}}, "response_format"),
    ({"response_format": {"type": "json_schema"}}, 'needs "json_schema"'),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
        "json_schema is invalid",
    ),
    ({"response_format": {"type": "json_object"}, "allowed_replies": ["a"]}, "one constraint"),
    ({"allowed_replies": []}, "non-empty list"),
    ({"tool_choice": "required"}, "has no tools"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "fly"}}}, "'fly'"),
    ({"tools": TOOLS, "tool_choice": {"type": "function"}}, "tool_choice must be"),
]


@pytest.mark.parametrize("fields,needle", BAD, ids=[b[1] for b in BAD])
def test_bad_structured_request_is_a_400(gateway, fields, needle):
    server, _ = gateway
    session = new_session(server)
    resp = httpx.post(
        f"{session['base_url']}/chat/completions",
        headers=bearer(session["key"]),
        timeout=60,
        json={"model": "tiny", "messages": messages(), "max_tokens": 8, **fields},
    )
    assert resp.status_code == 400, resp.text
    assert needle in resp.json()["error"]["message"]


def test_passthrough_forwards_response_format_and_refuses_allowed_replies(gateway, tmp_path):
    inner, store = gateway
    outer = start_gateway(f"{inner.url}/v1", tmp_path / "outer.sqlite", backend="openai", model=None)
    try:
        session = new_session(outer)
        url, key = f"{session['base_url']}/chat/completions", bearer(session["key"])
        base = {"model": "tiny", "messages": messages(), "temperature": 1.0, "max_tokens": 64}
        fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
        ok = httpx.post(url, headers=key, timeout=120, json={**base, "response_format": fmt})
        refused = httpx.post(url, headers=key, timeout=60, json={**base, "allowed_replies": ACTIONS})
    finally:
        outer.stop()
    assert ok.status_code == 200, ok.text
    jsonschema.validate(json.loads(ok.json()["choices"][0]["message"]["content"]), PERSON)
    assert refused.status_code == 400 and "allowed_replies" in refused.json()["error"]["message"]


def test_scripted_thought_then_call_fits_the_tool_grammar(scripted_engine_url, tmp_path):
    """Where the template leaves reasoning open to the model, a thought before the call fits the
    grammar and a plain-text reply does not (the scripted engine refuses a reply its grammar refuses)."""
    server = start_gateway(scripted_engine_url, tmp_path / "t.sqlite")
    try:
        session = new_session(server)
        call = '<tool_call>\n{"name": "look", "arguments": {}}\n</tool_call>'

        def ask(reply: str) -> httpx.Response:
            return httpx.post(
                f"{session['base_url']}/chat/completions",
                headers=bearer(session["key"]),
                timeout=60,
                json={"model": "tiny", "messages": messages(), "tools": TOOLS, "tool_choice": "required", **say(reply)},
            )

        thought, plain = ask("<think>\nLook first.\n</think>\n\n" + call), ask("I will look.")
    finally:
        server.stop()
    assert thought.status_code == 200, thought.text
    message = thought.json()["choices"][0]["message"]
    assert message["reasoning_content"].strip() == "Look first."
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["look"]
    assert plain.status_code == 400


async def test_responses_text_format_and_tool_choice(gateway):
    """The Responses wire maps its `text.format` and `tool_choice` onto the same constraints."""
    server, store = gateway
    session = new_session(server)
    tools = [
        {"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]} for t in TOOLS
    ]
    fmt = {"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}}
    base = {"model": "tiny", "input": "Who?", "temperature": 1.0, "max_output_tokens": 64}
    move = {"type": "function", "name": "move"}
    bodies = [{**base, "text": fmt}] * 3 + [
        {**base, "tools": tools, "tool_choice": move, "parallel_tool_calls": False, "max_output_tokens": 128}
    ] * 8
    answers = await post_all(f"{session['base_url']}/responses", session["key"], bodies)
    calls = 0
    for body, answer in zip(bodies, answers):
        assert answer.status_code == 200, answer.text
        output = answer.json()["output"]
        if "text" in body:
            [message] = [o for o in output if o["type"] == "message"]
            jsonschema.validate(json.loads(message["content"][0]["text"]), PERSON)
            continue
        if answer.json()["status"] == "incomplete":
            continue  # the template leaves reasoning to the model here: it may think up to max_output_tokens
        assert [o["type"] for o in output] in (["reasoning", "function_call"], ["function_call"]), output
        for call in (o for o in output if o["type"] == "function_call"):
            calls += 1
            assert call["name"] == "move"
            jsonschema.validate(json.loads(call["arguments"]), MOVE)
    assert calls
    sources = {c.response["constraint"]["source"] for c in stored_calls(store, session["session_id"])}
    assert sources == {"response_format", "tool_choice"}


def test_responses_bad_text_format_is_a_400(gateway):
    server, _ = gateway
    session = new_session(server)
    resp = httpx.post(
        f"{session['base_url']}/responses",
        headers=bearer(session["key"]),
        timeout=60,
        json={"model": "tiny", "input": "Who?", "text": {"format": {"type": "yaml"}}},
    )
    assert resp.status_code == 400 and "text.format" in resp.json()["error"]["message"], resp.text


async def test_streamed_allowed_replies(gateway):
    server, _ = gateway
    session = new_session(server)
    texts = []
    async with httpx.AsyncClient(timeout=120, headers=bearer(session["key"])) as client:
        for seed in range(4):
            body = {
                "model": "tiny",
                "messages": messages(),
                "temperature": 1.0,
                "seed": seed,
                "max_tokens": 32,
                "allowed_replies": ACTIONS,
                "stream": True,
            }
            parts = []
            async with client.stream("POST", f"{session['base_url']}/chat/completions", json=body) as resp:
                assert resp.status_code == 200
                async for line in resp.aiter_lines():
                    if line.startswith("data: {"):
                        parts += [c["delta"].get("content") or "" for c in json.loads(line[6:])["choices"]]
            texts.append("".join(parts))
    assert set(texts) <= set(ACTIONS)
