"""The embedded engine decodes correctly: batching, logprobs, stops, streaming."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from transformers import AutoTokenizer

from roost.rollout.keys import bearer
from roost.tests.rollout.engine_helpers import recorded_and_forward_logprobs

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a land far away,",
    "<|im_start|>user\nList three colours.<|im_end|>\n<|im_start|>assistant\n",
    "1, 2, 3, 4,",
    "The quick brown fox",
    "SELECT * FROM",
    "Roses are red,",
]


async def generate(client: httpx.AsyncClient, url: str, **body) -> dict:
    resp = await client.post(f"{url}/generate", json=body, timeout=120)
    assert resp.status_code == 200, resp.text
    return resp.json()


def greedy(text: str, n: int = 24) -> dict:
    return {
        "text": text,
        "sampling_params": {"max_new_tokens": n, "temperature": 0, "ignore_eos": True},
        "return_logprob": True,
    }


async def test_concurrent_greedy_equals_each_alone(engine_url):
    async with httpx.AsyncClient() as client:
        alone = [await generate(client, engine_url, **greedy(p)) for p in PROMPTS]
        together = await asyncio.gather(*(generate(client, engine_url, **greedy(p)) for p in PROMPTS))
    for a, b in zip(alone, together):
        assert a["output_ids"] == b["output_ids"]
        assert len(a["output_ids"]) == 24
        for (la, _, _), (lb, _, _) in zip(
            a["meta_info"]["output_token_logprobs"], b["meta_info"]["output_token_logprobs"]
        ):
            assert abs(la - lb) <= 1e-5


async def test_requests_join_a_running_batch(engine_url):
    """A short request sent while a long one decodes finishes first: it joined the batch."""
    async with httpx.AsyncClient() as client:
        long_task = asyncio.create_task(generate(client, engine_url, **greedy("Count slowly:", 400)))
        await asyncio.sleep(0.3)
        short = await generate(client, engine_url, **greedy("Hi", 4))
        assert not long_task.done()
        info = (await client.get(f"{engine_url}/get_server_info")).json()
        assert info["running"] == 1
        long = await long_task
    assert len(short["output_ids"]) == 4 and len(long["output_ids"]) == 400


async def test_sampled_logprobs_equal_a_plain_forward_pass(engine_url, tiny_model_path):
    body = {
        "text": PROMPTS[2],
        "return_logprob": True,
        "sampling_params": {"max_new_tokens": 32, "temperature": 1.0, "sampling_seed": 7, "ignore_eos": True},
    }
    async with httpx.AsyncClient() as client:
        answer = await generate(client, engine_url, **body)
    engine, reference = recorded_and_forward_logprobs(answer, tiny_model_path, PROMPTS[2])
    assert (engine - reference).abs().max().item() <= 1e-5


async def test_same_seed_same_sample_different_seed_differs(engine_url):
    def body(seed):
        return {"text": "Tell me", "sampling_params": {"max_new_tokens": 16, "sampling_seed": seed, "ignore_eos": True}}

    async with httpx.AsyncClient() as client:
        a, b, c = [await generate(client, engine_url, **body(s)) for s in (1, 1, 2)]
    assert a["output_ids"] == b["output_ids"] != c["output_ids"]


async def test_top_k_one_is_greedy(engine_url):
    async with httpx.AsyncClient() as client:
        g = await generate(client, engine_url, **greedy(PROMPTS[0], 12))
        k = await generate(
            client, engine_url, text=PROMPTS[0], sampling_params={"max_new_tokens": 12, "top_k": 1, "ignore_eos": True}
        )
    assert g["output_ids"] == k["output_ids"]


async def test_stream_yields_the_same_tokens(engine_url):
    ids, last = [], None
    async with httpx.AsyncClient() as client:
        full = await generate(client, engine_url, **greedy(PROMPTS[1], 16))
        async with client.stream(
            "POST", f"{engine_url}/generate", json={**greedy(PROMPTS[1], 16), "stream": True}
        ) as resp:
            async for line in resp.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    last = json.loads(line[6:])
                    ids += last["output_ids"]
    assert ids == full["output_ids"]
    assert last["meta_info"]["finish_reason"] == {"type": "length", "length": 16}
    assert last["text"] == full["text"]


async def test_an_answer_says_its_time_to_first_token(engine_url):
    """roost's `prefill_latency` (SGLang's answers do not carry it): within the request's latency,
    streamed or not, and only on the last chunk of a stream, as `e2e_latency`."""
    async with httpx.AsyncClient() as client:
        full = (await generate(client, engine_url, **greedy(PROMPTS[0], 8)))["meta_info"]
        async with client.stream(
            "POST", f"{engine_url}/generate", json={**greedy(PROMPTS[0], 8), "stream": True}
        ) as resp:
            chunks = [json.loads(line[6:])["meta_info"] async for line in resp.aiter_lines() if line[6:7] == "{"]
    for meta in (full, chunks[-1]):
        assert 0 < meta["prefill_latency"] < meta["e2e_latency"]
    assert all("prefill_latency" not in meta for meta in chunks[:-1])


async def test_stop_string_ends_generation_and_is_trimmed(scripted_engine_url):
    forced = "alpha beta gamma delta"
    params = {"max_new_tokens": 40, "stop": ["gamma"], "custom_params": {"scripted_reply": forced}}
    async with httpx.AsyncClient() as client:
        answer = await generate(client, scripted_engine_url, text="Say it.", sampling_params=params)
        kept = await generate(
            client, scripted_engine_url, text="Say it.", sampling_params={**params, "no_stop_trim": True}
        )
    assert answer["meta_info"]["finish_reason"] == {"type": "stop", "matched": "gamma"}
    assert answer["text"] == "alpha beta "
    assert kept["text"] == "alpha beta gamma"
    # Generation stopped at the token that completed the stop string, not at the end.
    assert len(answer["output_ids"]) < len(kept["output_ids"]) + 4 and answer["output_ids"][-1] != 151645


async def test_stop_token_id_ends_generation(scripted_engine_url, tiny_model_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    forced = "one two three four"
    ids = tokenizer.encode(forced, add_special_tokens=False)
    params = {"max_new_tokens": 40, "stop_token_ids": [ids[2]], "custom_params": {"scripted_reply": forced}}
    async with httpx.AsyncClient() as client:
        answer = await generate(client, scripted_engine_url, text="Count.", sampling_params=params)
        whole = await generate(
            client,
            scripted_engine_url,
            text="Count.",
            sampling_params={"max_new_tokens": 40, "custom_params": {"scripted_reply": forced}},
        )
    assert answer["output_ids"] == ids[:3]
    assert answer["meta_info"]["finish_reason"] == {"type": "stop", "matched": ids[2]}
    # Without a stop id the reply runs to the end-of-turn token, which is kept in output_ids.
    assert whole["output_ids"] == ids + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    assert whole["text"] == forced


async def test_min_new_tokens_holds_off_the_stop_tokens(engine_url):
    # min_new_tokens masks the stop tokens in the model's logits in place (the inference tensors
    # the model returns): the reply must come, greedy or sampled, not an aborted request.
    async with httpx.AsyncClient() as client:
        first = await generate(
            client, engine_url, text="Once upon a time", sampling_params={"max_new_tokens": 1, "temperature": 0}
        )
        stop = first["output_ids"][0]
        bodies = [
            {"max_new_tokens": 6, "min_new_tokens": 3, "stop_token_ids": [stop], "temperature": temperature}
            for temperature in (0, 1.0)
        ]
        held = await asyncio.gather(
            *(generate(client, engine_url, text="Once upon a time", sampling_params=params) for params in bodies)
        )
    for answer in held:
        assert answer["meta_info"]["finish_reason"]["type"] in ("stop", "length"), answer
        assert len(answer["output_ids"]) >= 3 and stop not in answer["output_ids"][:3], answer


async def test_max_new_tokens_bounds_the_reply(engine_url):
    async with httpx.AsyncClient() as client:
        short = await generate(
            client, engine_url, text="x", sampling_params={"max_new_tokens": 3, "temperature": 0, "ignore_eos": True}
        )
        zero = await generate(client, engine_url, text="x", sampling_params={"max_new_tokens": 0})
    assert len(short["output_ids"]) == 3
    assert short["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert zero["output_ids"] == [] and zero["meta_info"]["finish_reason"]["type"] == "length"


@pytest.mark.parametrize("temperature,top_p,min_p", [(0.7, 0.9, 0.0), (1.3, 1.0, 0.05)])
async def test_sampling_settings_produce_valid_tokens(engine_url, temperature, top_p, min_p):
    params = {
        "max_new_tokens": 8,
        "temperature": temperature,
        "top_p": top_p,
        "min_p": min_p,
        "top_k": 50,
        "ignore_eos": True,
    }
    async with httpx.AsyncClient() as client:
        answer = await generate(client, engine_url, text="Hello", sampling_params=params, return_logprob=True)
    assert len(answer["output_ids"]) == 8
    assert all(lp <= 0 for lp, _, _ in answer["meta_info"]["output_token_logprobs"])


async def test_a_prompt_that_extends_an_earlier_call_reuses_its_cache_and_samples_the_same(
    model_engine, tiny_model_path
):
    engine_url = model_engine.url
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    prompt = tokenizer.encode(PROMPTS[3], add_special_tokens=False)
    turn = {"sampling_params": {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}, "return_logprob": True}
    async with httpx.AsyncClient() as client:
        first = await generate(client, engine_url, input_ids=prompt, **turn)
        again = await generate(client, engine_url, input_ids=prompt, **turn)
        ids = prompt + first["output_ids"] + tokenizer.encode("\nAnd now in French:", add_special_tokens=False)
        reused = await generate(client, engine_url, input_ids=ids, **turn)
        flushed = await client.post(f"{engine_url}/flush_cache", headers=bearer(model_engine.api_key))
        assert flushed.status_code == 200
        fresh = await generate(client, engine_url, input_ids=ids, **turn)
    assert again["meta_info"]["cached_tokens"] == len(prompt) - 1  # the last prompt token runs again for its logits
    assert reused["meta_info"]["cached_tokens"] == len(prompt) + len(first["output_ids"]) - 1
    assert fresh["meta_info"]["cached_tokens"] == 0
    assert again["output_ids"] == first["output_ids"] and reused["output_ids"] == fresh["output_ids"]
    for (a, _, _), (b, _, _) in zip(
        reused["meta_info"]["output_token_logprobs"], fresh["meta_info"]["output_token_logprobs"]
    ):
        assert abs(a - b) <= 1e-5
