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
from aiohttp import web
from aiohttp.test_utils import TestServer

from roost.rollout.engine_api.sglang_client import (
    EngineProtocolError,
    EngineRejected,
    EngineUnavailable,
    SessionMode,
    SGLangClient,
    parse_generation,
)
from roost.rollout.engine_api.wire import AbortRequest, PauseRequest, UpdateWeightsRequest, parse_generate

io_struct = pytest.importorskip("sglang.srt.managers.io_struct")
sampling = pytest.importorskip("sglang.srt.sampling.sampling_params")

PARAMS = {
    "max_new_tokens": 10,
    "temperature": 0.0,
    "stop": ["\n\n"],
    "stop_token_ids": [151643],
    "top_p": 1.0,
    "top_k": -1,
    "ignore_eos": False,
    "skip_special_tokens": True,
}


def sglang_request(**fields) -> dict:
    req = io_struct.GenerateReqInput(**fields)
    return dataclasses.asdict(req)


def payload(client: SGLangClient, ids: list[int], *, stream: bool, rid: str | None, session: str | None = None) -> dict:
    return client.generate_payload(client.route(ids, rid, session), PARAMS, stream=stream)


def test_client_payload_uses_only_sglang_fields():
    plain = payload(SGLangClient("http://127.0.0.1:1"), [1, 2, 3], stream=True, rid="r1")
    known = {f.name for f in dataclasses.fields(io_struct.GenerateReqInput)}
    assert set(plain) <= known
    io_struct.GenerateReqInput(**plain)
    # the embedded engine's client names the call's program in SGLang's own field; SGLang's client does not
    embedded = SGLangClient("http://127.0.0.1:1", sessions=SessionMode.NAMED)
    named = payload(embedded, [1, 2, 3], stream=False, rid="r1", session="episode-7")
    assert named["session_params"] == {"id": "episode-7"} and set(named) <= known
    io_struct.GenerateReqInput(**named)
    assert parse_generate(named).session_params.id == "episode-7"
    unnamed = payload(SGLangClient("http://127.0.0.1:1"), [1], stream=False, rid=None, session="s")
    assert "session_params" not in unnamed
    params = sampling.SamplingParams(**plain["sampling_params"])
    params.verify(151936)


def test_client_payload_is_what_the_engine_parses():
    request = parse_generate(payload(SGLangClient("http://127.0.0.1:1"), [1, 2, 3], stream=False, rid=None))
    assert (request.input_ids, request.sampling_params, request.return_logprob, request.rid) == (
        [1, 2, 3],
        PARAMS,
        True,
        None,
    )


def test_engine_serves_a_request_built_by_sglang(engine_url):
    body = sglang_request(input_ids=[9707, 11, 1879], sampling_params=PARAMS, return_logprob=True)
    resp = httpx.post(f"{engine_url}/generate", content=json.dumps(body), timeout=60)
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    meta = answer["meta_info"]
    for name in (
        "id",
        "finish_reason",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "weight_version",
        "output_token_logprobs",
        "e2e_latency",
    ):
        assert name in meta
    assert meta["prompt_tokens"] == 3
    assert [entry[1] for entry in meta["output_token_logprobs"]] == answer["output_ids"]
    assert meta["finish_reason"]["type"] in ("stop", "length")


async def test_client_generate_matches_raw_request(engine_url):
    async with SGLangClient(engine_url) as client:
        gen = await client.generate([9707, 11, 1879], PARAMS)
    raw = httpx.post(
        f"{engine_url}/generate",
        json=sglang_request(input_ids=[9707, 11, 1879], sampling_params=PARAMS, return_logprob=True),
        timeout=60,
    ).json()
    assert gen.output_ids == raw["output_ids"]
    # the raw call reuses the first one's cached prompt: logprobs within fp32 noise
    assert gen.output_logprobs == pytest.approx([e[0] for e in raw["meta_info"]["output_token_logprobs"]], abs=1e-5)
    assert gen.weight_version == raw["meta_info"]["weight_version"]
    assert parse_generation(raw).finish_reason == gen.finish_reason


async def test_client_stream_reassembles_the_generation(engine_url):
    async with SGLangClient(engine_url) as client:
        whole = await client.generate([1, 2, 3], {**PARAMS, "max_new_tokens": 20, "ignore_eos": True, "stop": None})
        ids, logprobs, finish = [], [], None
        async for delta in client.generate_stream(
            [1, 2, 3], {**PARAMS, "max_new_tokens": 20, "ignore_eos": True, "stop": None}
        ):
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


class SGLangStandIn:
    """A stand-in for an SGLang 0.5 server: it keeps each request body, and answers the way
    SGLang's http_server does, with the fields roost's client does not read."""

    def __init__(self) -> None:
        self.bodies: dict[str, dict] = {}
        self.update_answer = dataclasses.asdict(
            io_struct.UpdateWeightFromDiskReqOutput(
                success=True, message="Succeeded to update model weights.", num_paused_requests=0
            )
        )

    async def handle(self, request: web.Request) -> web.Response:
        path = request.path
        self.bodies[path] = await request.json()
        if path == "/update_weights_from_disk":
            return web.json_response(self.update_answer)
        if path == "/pause_generation":
            return web.json_response({"message": "Generation paused successfully.", "status": "ok"})
        if path == "/generate":  # SGLang with skip_tokenizer_init: no "text"
            return web.json_response(
                {
                    "output_ids": [5, 6],
                    "meta_info": {
                        "id": "r1",
                        "finish_reason": {"type": "length", "length": 2},
                        "prompt_tokens": 3,
                        "weight_version": "default",
                        "input_token_logprobs": [[None, 1, None]],
                        "output_token_logprobs": [[-0.5, 5, None], [-0.25, 6, None]],
                        "output_top_logprobs": [None, None],
                        "completion_tokens": 2,
                        "cached_tokens": 0,
                        "spec_verify_ct": 0,
                        "e2e_latency": 0.01,
                    },
                }
            )
        return web.Response(status=200)  # /abort_request

    async def __aenter__(self) -> str:
        app = web.Application()
        app.router.add_post("/{path}", self.handle)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()
        return f"http://127.0.0.1:{self.server.port}"

    async def __aexit__(self, *exc: object) -> None:
        await self.server.close()


async def test_control_requests_are_sglangs_and_its_answers_are_read():
    sglang = SGLangStandIn()
    async with sglang as url, SGLangClient(url) as client:
        answer = await client.update_weights_from_disk("/ckpt/step-7", weight_version="7")
        await client.abort("call-1")
        await client.pause_generation()
        gen = await client.generate([1, 2, 3], PARAMS, rid="r1")
    assert (answer.success, answer.message, answer.weight_version) == (True, "Succeeded to update model weights.", None)
    update, abort = sglang.bodies["/update_weights_from_disk"], sglang.bodies["/abort_request"]
    assert update == {"model_path": "/ckpt/step-7", "weight_version": "7"} and abort == {"rid": "call-1"}
    io_struct.UpdateWeightFromDiskReqInput(**update)
    io_struct.AbortReq(**abort)
    # the same bodies are what roost's engine parses
    UpdateWeightsRequest.model_validate(update)
    AbortRequest.model_validate(abort)
    assert PauseRequest.model_validate(sglang.bodies["/pause_generation"]).mode == "in_place"
    io_struct.GenerateReqInput(**sglang.bodies["/generate"])
    assert (gen.output_ids, gen.output_logprobs, gen.text, gen.prompt_tokens) == ([5, 6], [-0.5, -0.25], "", 3)


async def test_an_update_answer_that_is_not_sglangs_is_a_protocol_error():
    sglang = SGLangStandIn()
    sglang.update_answer = {"ok": True}
    async with sglang as url, SGLangClient(url) as client:
        with pytest.raises(EngineProtocolError, match="update_weights_from_disk"):
            await client.update_weights_from_disk("/ckpt")
