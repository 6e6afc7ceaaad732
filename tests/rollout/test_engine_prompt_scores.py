"""A prompt's logprobs from the engine (SGLang's `return_logprob` with `logprob_start_len`): what a
teacher answers when it scores a student's recorded tokens, by id.

Oracles: transformers' own forward of the same checkpoint, and the engine's logprobs of the
tokens it sampled itself (the teacher's scores of recorded tokens equal its own, ≤ 1e-5).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math

import httpx
import pytest
import torch

from roost.rollout.engine_api.sglang_client import SGLangClient
from roost.rollout.engine_api.wire import parse_generate

io_struct = pytest.importorskip("sglang.srt.managers.io_struct")

PROMPT = [151644, 872, 198, 9707, 11, 1246, 525, 498, 30, 151645, 198, 151644, 77091, 198]


def test_the_score_request_is_sglangs_and_the_engines():
    body = SGLangClient("http://127.0.0.1:1").score_payload(PROMPT)
    assert set(body) <= {f.name for f in dataclasses.fields(io_struct.GenerateReqInput)}
    io_struct.GenerateReqInput(**body)
    request = parse_generate(body)
    assert (request.return_logprob, request.logprob_start_len, request.sampling_params["max_new_tokens"]) == (
        True,
        0,
        0,
    )


def _hf_scores(model_dir, ids: list[int]) -> list[float]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0, :-1]
    scores = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    return [math.nan, *scores.tolist()]


def test_prompt_logprobs_equal_transformers_and_the_engines_own_sampled_logprobs(engine_url, tiny_model_path):
    async def scenario():
        async with SGLangClient(engine_url) as client:
            sampled = await client.generate(PROMPT, {"max_new_tokens": 6, "temperature": 1.0, "sampling_seed": 3})
            path = PROMPT + sampled.output_ids
            return sampled, await client.score(path), await client.score(PROMPT)

    sampled, scores, prompt_only = asyncio.run(scenario())
    assert math.isnan(scores[0]) and len(scores) == len(PROMPT) + len(sampled.output_ids)
    # the engine's scores of what it sampled are the logprobs it sampled them with
    tail = scores[len(PROMPT) :]
    assert max(abs(a - b) for a, b in zip(tail, sampled.output_logprobs)) <= 1e-5
    reference = _hf_scores(tiny_model_path, PROMPT + sampled.output_ids)
    assert max(abs(a - b) for a, b in zip(scores[1:], reference[1:])) <= 1e-5
    assert max(abs(a - b) for a, b in zip(prompt_only[1:], scores[1 : len(PROMPT)])) <= 1e-5


def test_a_streamed_request_for_prompt_logprobs_is_refused_and_an_offset_start_is_honoured(engine_url):
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 0}, "return_logprob": True}
    refused = httpx.post(f"{engine_url}/generate", json={**body, "logprob_start_len": 0, "stream": True})
    assert refused.status_code == 400 and "not streamed" in refused.text
    tail = httpx.post(f"{engine_url}/generate", json={**body, "logprob_start_len": 10}).json()
    entries = tail["meta_info"]["input_token_logprobs"]
    assert [e[1] for e in entries] == PROMPT[10:] and all(e[0] is not None for e in entries)
    assert "input_token_logprobs" not in httpx.post(f"{engine_url}/generate", json=body).json()["meta_info"]
