"""The gateway records a mixture-of-experts call's routed experts (R3) beside its logprobs.

A real gateway (`record_routing`) on the embedded engine serving tiny-moe; oracle: the top-k of
transformers' Qwen3MoeForCausalLM router logits at every position of the stored path; the
session's training sample carries them (`Sample.routed_experts`).
"""

from __future__ import annotations

import numpy as np
import openai
import pytest
import torch

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.engine.tiny_model import tiny_model_dir
from roost.rollout.gateway.config import GatewayConfig
from roost.rollout.store import routing_blob
from roost.rollout.store.paths import session_samples
from roost.rollout.store.reader import TrajectoryReader
from tests.rollout.gateway_helpers import new_session, start_gateway, stored_calls


@pytest.fixture(scope="module")
def moe_url():
    with EngineProcess("tiny-moe") as url:
        yield url


def router_top_k(ids: list[int]) -> np.ndarray:
    """[tokens, layers, top_k] experts transformers routes each of `ids` to."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir(variant="tiny-moe"), dtype=torch.float32).eval()
    with torch.inference_mode():
        out = model(torch.tensor([ids]), output_router_logits=True)
    k = model.config.num_experts_per_tok
    return torch.stack([torch.topk(torch.softmax(r.float(), -1), k, -1).indices for r in out.router_logits], 1).numpy()


def test_each_call_stores_the_routing_of_its_whole_path(moe_url, tmp_path):
    server = start_gateway(moe_url, tmp_path / "store", model="tiny-moe", record_routing=True)
    try:
        session = new_session(server)
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=session["key"])
        messages = [{"role": "user", "content": "Hello, how are you?"}]
        first = client.chat.completions.create(model="tiny-moe", messages=messages, max_tokens=6, temperature=1.0)
        messages += [{"role": "assistant", "content": first.choices[0].message.content or ""}]
        messages += [{"role": "user", "content": "And then?"}]
        client.chat.completions.create(model="tiny-moe", messages=messages, max_tokens=6, temperature=1.0)
    finally:
        server.stop()
    calls = stored_calls(tmp_path / "store", session["session_id"])
    assert len(calls) == 2
    for call in calls:
        path = list(call.prompt_ids) + list(call.sampled_ids)
        stored = routing_blob.unpack(call.routed_experts)
        assert stored is not None and stored.shape == (len(path) - 1, 2 * 2)
        assert len(call.routed_experts) == 5 + stored.size  # one byte an id
        assert np.array_equal(stored.reshape(len(path) - 1, 2, 2), router_top_k(path)[:-1])
    # the training sample through the second call carries its routing, a row a token
    with TrajectoryReader(tmp_path / "store") as reader:
        (record,) = [s for s in reader.sessions() if s.session_id == session["session_id"]]
        samples = session_samples(reader, record)
    (sample,) = [s for s in samples if s.leaf_call_id == calls[1].call_id]
    assert len(sample.routed_experts) == len(sample.tokens)
    assert sample.routed_experts[:-1] == routing_blob.unpack(calls[1].routed_experts).tolist()
    assert sample.routed_experts[-1] == []  # the last sampled token never ran through the model


def test_routing_is_off_unless_asked_and_sglang_apis_only(moe_url, tmp_path):
    with pytest.raises(ValueError, match="record_routing is for the embedded and sglang backends"):
        GatewayConfig(engine_url=moe_url, model="tiny-moe", backend="vllm", record_routing=True)
    server = start_gateway(moe_url, tmp_path / "store", model="tiny-moe")
    try:
        session = new_session(server)
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=session["key"])
        client.chat.completions.create(model="tiny-moe", messages=[{"role": "user", "content": "Hi"}], max_tokens=3)
    finally:
        server.stop()
    (call,) = stored_calls(tmp_path / "store", session["session_id"])
    assert call.routed_experts == b""
