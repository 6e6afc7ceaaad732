"""Grammar-constrained decoding in the embedded engine: json_schema, regex, ebnf and choice hold
every sampled reply (many seeds, temperature 1), the recorded logprobs stay the model's own, and a
bad grammar is a 400 naming the field."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import jsonschema
import pytest

from roost.tests.rollout.engine_helpers import recorded_and_forward_logprobs

SEEDS = range(16)
PROMPT = "<|im_start|>user\nDescribe a person.<|im_end|>\n<|im_start|>assistant\n"
# bounded strings and numbers: every reply fits in MAX_TOKENS
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "member": {"type": "boolean"},
        "colour": {"enum": ["red", "green", "blue"]},
    },
    "required": ["name", "age", "member", "colour"],
    "additionalProperties": False,
}
MAX_TOKENS = 64
CHOICES = ["go north", "take key (brass)", "open door.", "look|around"]


def body(constraint: dict, seed: int = 0, **params) -> dict:
    sampling = {"max_new_tokens": MAX_TOKENS, "temperature": 1.0, "sampling_seed": seed, **constraint, **params}
    return {"text": PROMPT, "sampling_params": sampling, "return_logprob": True}


async def generate_all(url: str, bodies: list[dict]) -> list[dict]:
    async with httpx.AsyncClient(timeout=180) as client:
        answers = await asyncio.gather(*(client.post(f"{url}/generate", json=b) for b in bodies))
    for answer in answers:
        assert answer.status_code == 200, answer.text
    return [a.json() for a in answers]


async def sample(url: str, constraint: dict) -> list[dict]:
    return await generate_all(url, [body(constraint, seed) for seed in SEEDS])


def ended_by_grammar(answer: dict, kind: str) -> bool:
    meta = answer["meta_info"]
    return meta["finish_reason"]["type"] == "stop" and meta["constraint"] == {"type": kind, "backend": "xgrammar"}


async def test_json_schema_replies_parse_and_validate(engine_url):
    answers = await sample(engine_url, {"json_schema": json.dumps(SCHEMA)})
    for answer in answers:
        jsonschema.validate(json.loads(answer["text"]), SCHEMA)
        assert ended_by_grammar(answer, "json_schema")
    assert len({a["text"] for a in answers}) > 1


async def test_any_json_value(engine_url):
    """SGLang's `$$ANY$$` (its json_object): any JSON value; a reply the grammar ended parses."""
    answers = await sample(engine_url, {"json_schema": "$$ANY$$"})
    ended = [a for a in answers if ended_by_grammar(a, "json_schema")]
    assert ended
    for answer in ended:
        json.loads(answer["text"])


async def test_regex_replies_match(engine_url):
    pattern = r"[a-z]{2,6}-[0-9]{3}( ok)?"
    answers = await sample(engine_url, {"regex": pattern})
    for answer in answers:
        assert re.fullmatch(pattern, answer["text"]), answer["text"]
        assert ended_by_grammar(answer, "regex")


async def test_ebnf_replies_are_in_the_language(engine_url):
    grammar = 'root ::= move " " direction\nmove ::= "go" | "run"\ndirection ::= "north" | "south" | "east"'
    answers = await sample(engine_url, {"ebnf": grammar})
    for answer in answers:
        assert re.fullmatch(r"(go|run) (north|south|east)", answer["text"]), answer["text"]
        assert ended_by_grammar(answer, "ebnf")


async def test_choice_replies_are_one_of_the_choices(engine_url):
    """Choices with regex metacharacters are taken literally."""
    answers = await sample(engine_url, {"choice": CHOICES})
    assert {a["text"] for a in answers} <= set(CHOICES)
    assert len({a["text"] for a in answers}) > 1
    assert all(ended_by_grammar(a, "choice") for a in answers)


async def test_grammar_end_ends_the_request_even_with_ignore_eos(engine_url):
    [answer] = await generate_all(engine_url, [body({"regex": "abc"}, ignore_eos=True)])
    assert answer["text"] == "abc"
    assert answer["meta_info"]["finish_reason"]["type"] == "stop"
    assert len(answer["output_ids"]) < MAX_TOKENS


async def test_constrained_logprobs_equal_a_plain_forward_pass(engine_url, tiny_model_path):
    """The mask changes which token is drawn, not the recorded logprobs: they are the model's
    own (unmasked) distribution, what the trainer recomputes."""
    [answer] = await generate_all(engine_url, [body({"json_schema": json.dumps(SCHEMA)}, seed=3)])
    recorded, reference = recorded_and_forward_logprobs(answer, tiny_model_path, PROMPT)
    assert (recorded - reference).abs().max().item() <= 1e-5
    # a masked (renormalised) distribution would give the forced tokens logprobs near 0
    assert recorded.min().item() < -5


async def test_constrained_rows_leave_their_batch_neighbours_alone(engine_url):
    free = {
        "text": "The quick brown fox",
        "sampling_params": {"max_new_tokens": 24, "temperature": 0, "ignore_eos": True},
    }
    [alone] = await generate_all(engine_url, [free])
    mixed = await generate_all(engine_url, [free, *(body({"choice": CHOICES}, s) for s in range(4)), free])
    assert mixed[0]["output_ids"] == mixed[-1]["output_ids"] == alone["output_ids"]
    assert "constraint" not in alone["meta_info"]


async def test_stream_says_it_is_constrained(engine_url):
    chunks = []
    async with httpx.AsyncClient(timeout=120) as client:
        async with client.stream(
            "POST", f"{engine_url}/generate", json={**body({"choice": CHOICES}), "stream": True}
        ) as resp:
            async for line in resp.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunks.append(json.loads(line[6:]))
    assert chunks[-1]["text"] in CHOICES
    assert chunks[-1]["meta_info"]["constraint"]["type"] == "choice"


BAD = [
    ({"json_schema": "{not json"}, "sampling_params.json_schema is invalid: Failed to parse JSON"),
    (
        {"json_schema": json.dumps({"type": "nonsense"})},
        'sampling_params.json_schema is invalid: Unsupported type "nonsense"',
    ),
    ({"json_schema": {"type": "object"}}, "json_schema: Input should be a valid string"),
    ({"regex": "(ab"}, "sampling_params.regex is invalid: Regex parsing error at position 4"),
    (
        {"ebnf": "root ::= missing"},
        'sampling_params.ebnf is invalid: EBNF parser error at line 1, column 10: Rule "missing"',
    ),
    ({"choice": []}, "choice must be a non-empty list of non-empty strings"),
    ({"choice": ["a", ""]}, "choice must be a non-empty list of non-empty strings"),
    (
        {"regex": "a", "ebnf": 'root ::= "a"'},
        "give at most one of json_schema, regex, ebnf, choice; got regex and ebnf",
    ),
    ({"structural_tag": "{}"}, "structural_tag"),
]


@pytest.mark.parametrize("constraint,needle", BAD, ids=[b[1][:40] for b in BAD])
async def test_bad_grammar_is_a_400_and_the_engine_keeps_serving(engine_url, constraint, needle):
    async with httpx.AsyncClient(timeout=120) as client:
        resp = await client.post(f"{engine_url}/generate", json=body(constraint))
        assert resp.status_code == 400, resp.text
        assert needle in resp.json()["error"]["message"]
        ok = await client.post(f"{engine_url}/generate", json=body({"regex": "[0-9]{2}"}))
    assert ok.status_code == 200 and re.fullmatch("[0-9]{2}", ok.json()["text"])


async def test_scripted_reply_must_match_the_grammar(scripted_engine_url):
    """A scripted engine forces its reply through the grammar too: one that fits is served,
    one that does not is a 400 before anything runs."""

    def scripted(reply: str) -> dict:
        return body({"json_schema": json.dumps(SCHEMA)}, custom_params={"scripted_reply": reply})

    fits = json.dumps({"name": "Ada", "age": 36, "member": True, "colour": "blue"})
    async with httpx.AsyncClient(timeout=60) as client:
        good = await client.post(f"{scripted_engine_url}/generate", json=scripted(fits))
        bad = await client.post(f"{scripted_engine_url}/generate", json=scripted('{"name": "Ada"}'))
    assert good.status_code == 200 and good.json()["text"] == fits
    assert bad.status_code == 400
    assert "does not match the request's json_schema" in bad.json()["error"]["message"]


def test_a_length_bounded_string_takes_no_raw_control_character():
    """xgrammar 0.2.9 compiles `maxLength` to a class that lets U+0000–U+001F through unescaped;
    the tiny model then wrote `{"name": "//\\x05ości潤", ...}` (a suite run here), which
    `json.loads` refuses. The engine says the bounds as a pattern that excludes them."""
    import xgrammar
    from transformers import AutoTokenizer

    from roost.rollout.engine.grammar import compile_grammar, new_compiler
    from roost.rollout.engine.tiny_model import tiny_model_dir

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir())
    compiler = new_compiler(tokenizer, len(tokenizer), [tokenizer.convert_tokens_to_ids("<|im_end|>")])
    grammar = compile_grammar(compiler, "json_schema", json.dumps(SCHEMA))
    sampled = [90, 31486, 1, 25, 35574]  # {"name": "//   (the ids of that reply)
    assert tokenizer.decode(193) == "\x05"  # its next id
    matcher = xgrammar.GrammarMatcher(grammar)
    assert all(matcher.accept_token(t) for t in sampled) and not matcher.accept_token(193)
    for text, fits in [('{"name": "ości潤', True), ('{"name": "abcdefghi"', False), ('{"name": "a\\u0005', False)]:
        assert xgrammar.GrammarMatcher(grammar).accept_string(text) == fits, text
