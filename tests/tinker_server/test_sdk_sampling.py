"""Sampling through the pinned SDK on `roost tinker serve`: a snapshot of the trained weights
samples tokens with roost's embedded engine, seeds fix the samples, stop and max_tokens end them,
and `compute_logprobs` equals the training model's `forward` logprobs of the same tokens."""

from __future__ import annotations

import numpy as np
import pytest

tinker = pytest.importorskip("tinker")

PROMPT = [11, 22, 33, 44, 55, 66, 77]


@pytest.fixture(scope="module")
def training(service):
    return service.create_lora_training_client(base_model="tiny", rank=4).result()


@pytest.fixture(scope="module")
def sampler(training):
    return training.save_weights_and_get_sampling_client().result()


def test_sample_returns_tokens_with_their_logprobs(sampler):
    params = tinker.types.SamplingParams(max_tokens=6, temperature=1.0, seed=7, stop=[])
    out = sampler.sample(tinker.types.ModelInput.from_ints(PROMPT), 3, params).result()
    assert len(out.sequences) == 3
    for sequence in out.sequences:
        assert len(sequence.tokens) == 6 and sequence.stop_reason == "length"
        assert len(sequence.logprobs) == 6 and all(lp <= 0 for lp in sequence.logprobs)
    again = sampler.sample(tinker.types.ModelInput.from_ints(PROMPT), 3, params).result()
    assert [s.tokens for s in again.sequences] == [s.tokens for s in out.sequences]


def test_a_stop_token_ends_the_sample(sampler):
    greedy = tinker.types.SamplingParams(max_tokens=5, temperature=0.0, stop=[])
    first = sampler.sample(tinker.types.ModelInput.from_ints(PROMPT), 1, greedy).result().sequences[0].tokens
    end = first.index(first[-1])  # where greedy decoding first says the last token
    stopped = tinker.types.SamplingParams(max_tokens=5, temperature=0.0, stop=[first[-1]])
    sequence = sampler.sample(tinker.types.ModelInput.from_ints(PROMPT), 1, stopped).result().sequences[0]
    assert sequence.stop_reason == "stop" and sequence.tokens == first[: end + 1]


def test_compute_logprobs_equals_forward_logprobs(training, sampler):
    logprobs = sampler.compute_logprobs(tinker.types.ModelInput.from_ints(PROMPT)).result()
    assert logprobs[0] is None and len(logprobs) == len(PROMPT)
    datum = tinker.types.Datum(
        model_input=tinker.types.ModelInput.from_ints(PROMPT[:-1]),
        loss_fn_inputs={
            "target_tokens": tinker.types.TensorData(data=PROMPT[1:], dtype="int64", shape=[len(PROMPT) - 1])
        },
    )
    forward = training.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    np.testing.assert_allclose(np.array(logprobs[1:]), forward, atol=1e-4)


def test_a_base_model_sampler_samples(service):
    sampler = service.create_sampling_client(base_model="tiny").result()
    params = tinker.types.SamplingParams(max_tokens=3, temperature=0.0, stop=[])
    assert len(sampler.sample(tinker.types.ModelInput.from_ints(PROMPT), 1, params).result().sequences[0].tokens) == 3
