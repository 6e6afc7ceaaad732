"""The embedded engine on a mixture-of-experts model (`tiny-moe`, Qwen3-MoE architecture), and the
routed experts it records (R3: SGLang's `return_routed_experts`).

Oracle: transformers' `Qwen3MoeForCausalLM` forward of the same folder, its logprobs (<= 1e-4 in
float32) and the top-k of its router logits (`output_router_logits=True`) at every position run
through the model.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses

import httpx
import numpy as np
import pytest
import torch

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.engine.model_spec import ModelSpec, read_config
from roost.rollout.engine.tiny_model import tiny_model_dir
from roost.rollout.engine_api.routed_experts import MalformedRoutedExperts, RoutedExperts, encode
from roost.rollout.engine_api.sglang_client import SGLangClient
from roost.rollout.engine_api.wire import parse_generate

PROMPT = [151644, 872, 198, 9707, 11, 1246, 525, 498, 30, 151645, 198, 151644, 77091, 198]
SAMPLING = {"max_new_tokens": 8, "temperature": 1.0, "ignore_eos": True}


@pytest.fixture(scope="module")
def moe_path():
    return tiny_model_dir(variant="tiny-moe")


@pytest.fixture(scope="module")
def moe_url(moe_path):
    with EngineProcess("tiny-moe") as url:
        yield url


@pytest.fixture(scope="module")
def reference(moe_path):
    """ids -> (logprob of each token given the ones before it, [tokens, layers, top_k] router top-k)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(moe_path, dtype=torch.float32).eval()
    top_k = model.config.num_experts_per_tok

    def forward(ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
        with torch.inference_mode():
            out = model(torch.tensor([ids]), output_router_logits=True)
        logprobs = torch.log_softmax(out.logits[0, :-1].float(), -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
        probs = [torch.softmax(layer.float(), -1) for layer in out.router_logits]
        experts = torch.stack([torch.topk(p, top_k, dim=-1).indices for p in probs], dim=1)
        return np.concatenate([[np.nan], logprobs.numpy()]), experts.numpy()

    return forward


def test_the_spec_reads_qwen3_moe_configs(moe_path):
    spec = ModelSpec.from_folder(moe_path)
    assert spec.family == "qwen3_moe" and spec.qk_norm and spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.top_k, spec.moe.norm_topk_prob, spec.moe.layers) == (8, 2, True, (0, 1))
    config = read_config(moe_path) | {"num_hidden_layers": 4, "decoder_sparse_step": 2, "mlp_only_layers": [3]}
    assert ModelSpec.from_config(config).moe.layers == (1,)  # as Qwen3MoeDecoderLayer picks its sparse layers


def test_logprobs_and_routed_experts_equal_transformers(moe_url, reference):
    """Three requests decoded together, then one that reuses the first one's cached prefix: every
    sampled logprob and prompt score equals transformers', and so does the routing of every token
    run through the model (the reused prefix's included)."""

    async def scenario():
        async with SGLangClient(moe_url) as client:
            firsts = await asyncio.gather(
                *(
                    client.generate(PROMPT, {**SAMPLING, "sampling_seed": seed}, routed_experts=True)
                    for seed in (1, 2, 3)
                )
            )
            extended = PROMPT + firsts[0].output_ids[:5]
            again = await client.generate(extended, {**SAMPLING, "sampling_seed": 4}, routed_experts=True)
            scores = await client.score(PROMPT + firsts[0].output_ids)
            return [(PROMPT, g) for g in firsts] + [(extended, again)], scores

    runs, scores = asyncio.run(scenario())
    assert runs[-1][1].meta_info["cached_tokens"] > len(PROMPT)  # the prefix came from the cache
    for prompt, generation in runs:
        ids = prompt + generation.output_ids
        logprobs, experts = reference(ids)
        assert np.abs(np.array(generation.output_logprobs) - logprobs[len(prompt) :]).max() <= 1e-4
        routed = generation.routed_experts
        assert routed is not None and routed.start == 0 and routed.tokens == len(ids) - 1
        assert np.array_equal(routed.per_layer(2), experts[:-1])
    logprobs, _ = reference(PROMPT + runs[0][1].output_ids)
    assert np.abs(np.array(scores[1:]) - logprobs[1:]).max() <= 1e-4


def test_a_stream_carries_the_routed_experts_on_its_last_chunk(moe_url):
    async def scenario():
        async with SGLangClient(moe_url) as client:
            params = {**SAMPLING, "sampling_seed": 7}
            whole = await client.generate(PROMPT, params, routed_experts=True)
            deltas = [d async for d in client.generate_stream(PROMPT, params, routed_experts=True)]
            return whole, deltas

    whole, deltas = asyncio.run(scenario())
    assert [d.routed_experts is not None for d in deltas] == [False] * (len(deltas) - 1) + [True]
    assert np.array_equal(deltas[-1].routed_experts.ids, whole.routed_experts.ids)


def test_routed_experts_are_off_by_default_and_start_where_asked(moe_url):
    body = {"input_ids": PROMPT, "sampling_params": {**SAMPLING, "sampling_seed": 5}}
    plain = httpx.post(f"{moe_url}/generate", json=body).json()
    assert "routed_experts" not in plain["meta_info"]
    full = httpx.post(f"{moe_url}/generate", json={**body, "return_routed_experts": True}).json()
    tail = httpx.post(
        f"{moe_url}/generate", json={**body, "return_routed_experts": True, "routed_experts_start_len": 10}
    ).json()
    assert full["output_ids"] == tail["output_ids"] == plain["output_ids"]
    rows = len(PROMPT) + len(full["output_ids"]) - 1
    whole = RoutedExperts.decode(full["meta_info"]["routed_experts"], rows)
    part = RoutedExperts.decode(tail["meta_info"]["routed_experts"], rows - 10, start=10)
    assert np.array_equal(part.ids, whole.ids[10:])
    for wrong, says in [
        ({"routed_experts_start_len": len(PROMPT) + 1}, "between 0 and the prompt"),
        ({"sampling_params": {"max_new_tokens": 0}}, "max_new_tokens >= 1"),
    ]:
        refused = httpx.post(f"{moe_url}/generate", json={**body, "return_routed_experts": True, **wrong})
        assert refused.status_code == 400 and says in refused.json()["error"]["message"]


def test_a_dense_model_asked_for_routed_experts_answers_400(engine_url):
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2}, "return_routed_experts": True}
    refused = httpx.post(f"{engine_url}/generate", json=body)
    assert refused.status_code == 400
    assert "(qwen3) is dense and routes no experts" in refused.json()["error"]["message"]


def test_the_encoding_is_sglangs_and_round_trips():
    experts = np.random.default_rng(0).integers(-1, 128, size=(7, 3, 4)).astype(np.int32)
    data = encode(experts)
    # SGLang's own reading (slime's `_update_routed_experts`): little-endian int32, C order
    assert np.array_equal(np.frombuffer(base64.b64decode(data), dtype="<i4").reshape(7, 3, 4), experts)
    decoded = RoutedExperts.decode(data, rows=7, start=2)
    assert decoded.start == 2 and np.array_equal(decoded.per_layer(3), experts)
    assert decoded.encode() == data
    for bad, rows in [(data, 5), ("not base64!", 7), (base64.b64encode(b"\x00" * 6).decode(), 1)]:
        with pytest.raises(MalformedRoutedExperts):
            RoutedExperts.decode(bad, rows)
    with pytest.raises(MalformedRoutedExperts, match="layers"):
        decoded.per_layer(5)


def test_the_request_is_sglangs_and_asks_only_when_told():
    io_struct = pytest.importorskip("sglang.srt.managers.io_struct")
    client = SGLangClient("http://127.0.0.1:1")
    call = client.route(PROMPT, "r1", None)
    plain = client.generate_payload(call, SAMPLING, stream=False)
    asked = client.generate_payload(call, SAMPLING, stream=False, routed_experts=True)
    assert "return_routed_experts" not in plain
    assert set(plain) <= {f.name for f in dataclasses.fields(io_struct.GenerateReqInput)}  # SGLang 0.5.3's too
    assert set(asked) - set(plain) == {"return_routed_experts"} and parse_generate(asked).return_routed_experts
