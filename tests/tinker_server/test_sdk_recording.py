"""Tinker samples through the pinned SDK: LoRA snapshots sampled as adapters on the base model's
one engine, and every sample recorded in roost's trajectory store and shown by `roost view`.

Two tenants sample at once and each gets what it gets alone; the adapter path samples what the
merged weights (PEFT's merge, on an engine of their own) sample; the store, read with roost's own
reader, holds the SDK's tokens and logprobs exactly, with each snapshot's adapter and weight
version; a snapshot unloaded for want of room is loaded again and samples the same.

The comparisons of one sampler's answers sample greedily: the tiny model's next-token
distribution is nearly flat over 151k ids, so a seeded draw at temperature 1 moves to the
neighbouring id when a batch of another shape rounds the logits differently (seen under load:
110395 against 110396), while the argmax stays put."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest
import uvicorn

from roost.rollout.store.reader import TrajectoryReader
from roost.serving.thread import UvicornThread
from roost.viewer.app import ViewerConfig, build_app

from .conftest import API_KEY, tinker_server
from .test_sdk_training import _batch, _datum

tinker = pytest.importorskip("tinker")

PROMPT = [11, 22, 33, 44, 55, 66, 77]
ADAM = tinker.types.AdamParams(learning_rate=5e-2, eps=1e-2)
SEEDED = tinker.types.SamplingParams(max_tokens=8, temperature=1.0, seed=5, stop=[])
GREEDY = tinker.types.SamplingParams(max_tokens=8, temperature=0.0, stop=[])
GREEDY_SEEDED = tinker.types.SamplingParams(max_tokens=8, temperature=0.0, seed=5, stop=[])


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model_path):
    """A server whose base-model engine holds 2 adapters at most; its folder holds its store and
    its temporary folder (the snapshots)."""
    folder, temp = tmp_path_factory.mktemp("tinker-rec"), tmp_path_factory.mktemp("tinker-rec-tmp")
    with tinker_server(folder, "--max-loaded-adapters", "2", env={"TMPDIR": str(temp)}) as url:
        client = tinker.ServiceClient(base_url=url, api_key=API_KEY)
        yield client, folder / "trajectories.sqlite", temp
        client.close("success").result()


def _trained(service, steps: int, seed: int):
    training = service.create_lora_training_client(base_model="tiny", rank=4, seed=seed).result()
    for step in range(steps):
        training.forward_backward([_datum(p, c) for p, c in _batch(seed=seed + step)], "cross_entropy").result()
        training.optim_step(ADAM).result()
    return training


@pytest.fixture(scope="module")
def tenants(server):
    """Two LoRA tenants of the tiny model, trained 1 and 2 steps, each with a snapshot sampler."""
    service = server[0]
    a, b = _trained(service, 1, seed=1), _trained(service, 2, seed=2)
    return {
        "a": (a, a.save_weights_and_get_sampling_client().result()),
        "b": (b, b.save_weights_and_get_sampling_client().result()),
    }


def _sample(sampler, params=SEEDED, n: int = 2):
    return sampler.sample(tinker.types.ModelInput.from_ints(PROMPT), n, params)


def _tokens(response) -> list[list[int]]:
    return [s.tokens for s in response.sequences]


def _calls(store: Path, model_id: str):
    with TrajectoryReader(store) as reader:
        (session,) = reader.sessions(group_id=model_id)
        return session, reader.calls(session.session_id)


def test_two_tenants_sampling_at_once_each_get_what_they_get_alone_and_are_recorded(server, tenants):
    _, store, _ = server
    (a, sampler_a), (b, sampler_b) = tenants["a"], tenants["b"]
    alone = {name: _sample(sampler, GREEDY_SEEDED).result() for name, (_, sampler) in tenants.items()}
    # both in flight before either is read
    at_once = [_sample(sampler_a, GREEDY_SEEDED), _sample(sampler_b, GREEDY_SEEDED)]
    together = {"a": at_once[0].result(), "b": at_once[1].result()}
    for name in ("a", "b"):
        assert _tokens(together[name]) == _tokens(alone[name])
    assert _tokens(alone["a"]) != _tokens(alone["b"]), "the two adapters sampled alike"

    for name, training, version in (("a", a, "1"), ("b", b, "2")):
        session, calls = _calls(store, training.model_id)
        assert session.task["model_id"] == training.model_id and session.metadata["source"] == "tinker"
        returned = [s for r in (alone[name], together[name]) for s in r.sequences]
        calls = calls[-4:]  # this test's, whichever tests ran before
        assert len(calls) == len(returned) == 4
        for call, sequence in zip(calls, returned):
            assert list(call.prompt_ids) == PROMPT
            assert list(call.sampled_ids) == sequence.tokens
            np.testing.assert_array_equal(np.float32(call.sampled_logprobs), np.float32(sequence.logprobs))
            assert call.finish_reason["type"] == sequence.stop_reason == "length"
            assert call.adapter.startswith(f"{training.model_id}/save-") and call.weight_version == version
            assert call.sampling_params["temperature"] == 0.0 and call.sampling_params["max_tokens"] == 8
        assert [c.sampling_params["seed"] for c in calls] == [5, 6, 5, 6]  # sample i: seed + i
    assert _calls(store, a.model_id)[1][-1].adapter != _calls(store, b.model_id)[1][-1].adapter


def test_compute_logprobs_is_recorded_with_its_prompt_logprobs(server, tenants):
    _, store, _ = server
    training, sampler = tenants["a"]
    before = len(_calls(store, training.model_id)[1])
    logprobs = sampler.compute_logprobs(tinker.types.ModelInput.from_ints(PROMPT)).result()
    calls = _calls(store, training.model_id)[1]
    assert len(calls) == before + 1
    recorded = calls[-1].response["prompt_logprobs"]
    assert recorded[0] is None and np.allclose(recorded[1:], logprobs[1:], atol=1e-6)


def _merged_engine(base: Path, adapter: Path, folder: Path):
    """PEFT's merge of `adapter` into the base, on a roost engine of its own (the merged path). The
    tiny model ties its unembedding to its embedding, and the adapter trains the unembedding: it is
    untied first (PEFT's advice), so the merge changes the unembedding alone, as the adapter does."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from roost.rollout.engine.engine import Engine, EngineConfig

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, tie_word_embeddings=False)
    model.lm_head.weight.data = model.model.embed_tokens.weight.data.clone()
    PeftModel.from_pretrained(model, adapter).merge_and_unload().save_pretrained(folder)
    for file in base.iterdir():
        if file.name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"):
            shutil.copy(file, folder / file.name)
    engine = Engine(EngineConfig(folder, max_running=4))
    engine.start()
    return engine


def test_the_adapter_path_samples_what_the_merged_weights_sample(server, tenants, tiny_model_path, tmp_path):
    import asyncio

    from roost.rollout.engine_api.wire import SamplingParams

    _, store, temp = server
    training, sampler = tenants["b"]
    greedy, seeded = _sample(sampler, GREEDY, 1).result(), _sample(sampler, SEEDED, 1).result()
    snapshot = _calls(store, training.model_id)[1][-1].adapter.rsplit("/", 1)[1]
    (adapter,) = [p for p in temp.rglob("adapter") if p.parent.name == snapshot]
    engine = _merged_engine(tiny_model_path, adapter, tmp_path / "merged")
    try:
        for response, temperature, seed in ((greedy, 0.0, None), (seeded, 1.0, 5)):
            params = SamplingParams(max_new_tokens=8, temperature=temperature, sampling_seed=seed, ignore_eos=True)
            merged = asyncio.run(engine.generate(PROMPT, params))
            (sequence,) = response.sequences
            assert sequence.tokens == merged.output_ids
            np.testing.assert_allclose(sequence.logprobs, merged.logprobs, atol=1e-4)
    finally:
        engine.stop()


def test_an_unloaded_snapshot_is_loaded_again_and_samples_the_same(server, tenants):
    service, store, _ = server
    first = {name: _tokens(_sample(sampler, GREEDY).result()) for name, (_, sampler) in tenants.items()}
    c = _trained(service, 1, seed=3)
    sampler_c = c.save_weights_and_get_sampling_client().result()
    _sample(sampler_c).result()  # three snapshots, room for two: the least recently sampled goes
    for name, (_, sampler) in tenants.items():
        assert _tokens(_sample(sampler, GREEDY).result()) == first[name]
    assert _calls(store, c.model_id)[1][0].weight_version == "1"


def test_the_viewer_shows_the_recorded_samples_with_their_adapter(server, tenants):
    _, store, _ = server
    training, _ = tenants["a"]
    session, calls = _calls(store, training.model_id)
    app = build_app(ViewerConfig(store=store))
    with UvicornThread(uvicorn.Config(app, log_level="warning"), "the viewer") as url:
        page = httpx.get(f"{url}/sessions/{session.session_id}")
        assert page.status_code == 200 and calls[0].call_id in page.text
        call = httpx.get(f"{url}/calls/{calls[0].call_id}")
        assert call.status_code == 200
        assert f"LoRA adapter {calls[0].adapter}" in call.text and "weights v1" in call.text
        for position, token in enumerate(calls[0].sampled_ids, start=len(PROMPT)):
            assert f"#{position} id {token} " in call.text
        groups = httpx.get(f"{url}/groups?version=1")
        assert training.model_id in groups.text


def test_a_full_weight_snapshot_and_the_base_model_are_recorded_without_an_adapter(tmp_path, tiny_model_path):
    with tinker_server(tmp_path, "--full-weight") as url:
        service = tinker.ServiceClient(base_url=url, api_key=API_KEY)
        training = _trained(service, 1, seed=4)
        snapshot = _sample(training.save_weights_and_get_sampling_client().result()).result()
        base = _sample(service.create_sampling_client(base_model="tiny").result(), GREEDY, 1).result()
        service.close("success").result()
    for group, response, version in ((training.model_id, snapshot, "1"), ("base:tiny", base, "0")):
        _, calls = _calls(tmp_path / "trajectories.sqlite", group)
        assert [list(c.sampled_ids) for c in calls] == _tokens(response)
        assert {(c.adapter, c.weight_version, c.model) for c in calls} == {("", version, "tiny")}
