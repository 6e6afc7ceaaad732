"""The SGLang client against a real engine, with requests built by SGLang's own classes.

SGLang's `GenerateReqInput` and `SamplingParams` come from the `sglang` package itself
(installed without its GPU dependencies), so if roost's client, or the engine, ever
uses a field SGLang does not know, these tests fail.
"""

from __future__ import annotations

import dataclasses
import json

import httpx
import pytest

from roost.rollout.sglang_client import (
    EngineRejected,
    EngineUnavailable,
    SGLangClient,
    parse_generation,
)

io_struct = pytest.importorskip("sglang.srt.managers.io_struct")
sampling = pytest.importorskip("sglang.srt.sampling.sampling_params")

PARAMS = {"max_new_tokens": 10, "temperature": 0.0, "stop": ["\n\n"], "stop_token_ids": [151643],
          "top_p": 1.0, "top_k": -1, "ignore_eos": False, "skip_special_tokens": True}


def sglang_request(**fields) -> dict:
    req = io_struct.GenerateReqInput(**fields)
    return dataclasses.asdict(req)


def test_client_payload_uses_only_sglang_fields():
    payload = SGLangClient.generate_payload([1, 2, 3], PARAMS, stream=True, rid="r1")
    known = {f.name for f in dataclasses.fields(io_struct.GenerateReqInput)}
    assert set(payload) <= known
    io_struct.GenerateReqInput(**payload)
    params = sampling.SamplingParams(**payload["sampling_params"])
    params.verify(151936)


def test_engine_serves_a_request_built_by_sglang(engine_url):
    body = sglang_request(input_ids=[9707, 11, 1879], sampling_params=PARAMS, return_logprob=True)
    resp = httpx.post(f"{engine_url}/generate", content=json.dumps(body), timeout=60)
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    meta = answer["meta_info"]
    for name in ("id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "weight_version",
                 "output_token_logprobs", "e2e_latency"):
        assert name in meta
    assert meta["prompt_tokens"] == 3
    assert [entry[1] for entry in meta["output_token_logprobs"]] == answer["output_ids"]
    assert meta["finish_reason"]["type"] in ("stop", "length")


async def test_client_generate_matches_raw_request(engine_url):
    async with SGLangClient(engine_url) as client:
        gen = await client.generate([9707, 11, 1879], PARAMS)
    raw = httpx.post(f"{engine_url}/generate", json=sglang_request(
        input_ids=[9707, 11, 1879], sampling_params=PARAMS, return_logprob=True), timeout=60).json()
    assert gen.output_ids == raw["output_ids"]
    # the raw call reuses the first one's cached prompt: logprobs within fp32 noise
    assert gen.output_logprobs == pytest.approx([e[0] for e in raw["meta_info"]["output_token_logprobs"]], abs=1e-5)
    assert gen.weight_version == raw["meta_info"]["weight_version"]
    assert parse_generation(raw).finish_reason == gen.finish_reason


async def test_client_stream_reassembles_the_generation(engine_url):
    async with SGLangClient(engine_url) as client:
        whole = await client.generate([1, 2, 3], {**PARAMS, "max_new_tokens": 20, "ignore_eos": True, "stop": None})
        ids, logprobs, finish = [], [], None
        async for delta in client.generate_stream([1, 2, 3], {**PARAMS, "max_new_tokens": 20, "ignore_eos": True, "stop": None}):
            ids += delta.output_ids
            logprobs += delta.output_logprobs
            finish = delta.finish_reason or finish
    # the second call reuses the first one's cached prompt: the same tokens, logprobs within fp32 noise
    assert ids == whole.output_ids and logprobs == pytest.approx(whole.output_logprobs, abs=1e-5)
    assert finish == {"type": "length", "length": 20}


async def test_client_control_endpoints(model_engine):
    async with SGLangClient(model_engine.url, api_key=model_engine.api_key) as client:
        assert await client.health()
        info = await client.model_info()
        assert info["is_generation"] and info["vocab_size"] == 151936
        await client.flush_cache()
        with pytest.raises(EngineRejected) as rejected:
            await client.generate([1], {"max_new_tokens": 2, "bogus": 1})
        assert rejected.value.status == 400 and "bogus" in str(rejected.value)


async def test_client_reports_an_engine_that_is_down():
    async with SGLangClient("http://127.0.0.1:9", connect_timeout_s=1) as client:
        assert not await client.health()
        with pytest.raises(EngineUnavailable):
            await client.generate([1], {"max_new_tokens": 1})
