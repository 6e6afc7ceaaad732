"""The pinned `tinker` SDK, unchanged, trains the tiny model on `roost tinker serve`: its
cross_entropy loss and per-token logprobs are roost's own SFT loss and logprobs on the same batch,
and the loss falls over a few optimizer steps."""

from __future__ import annotations

import random

import numpy as np
import pytest

from .conftest import API_KEY

tinker = pytest.importorskip("tinker")


def _batch(seed: int = 0, vocab: int = 1000) -> list[tuple[list[int], list[int]]]:
    """(prompt, completion) token pairs."""
    rng = random.Random(seed)
    return [
        ([rng.randrange(vocab) for _ in range(5 + i)], [rng.randrange(vocab) for _ in range(4 + i)]) for i in range(3)
    ]


def _datum(prompt: list[int], completion: list[int], weight: float = 1.0):
    tokens = prompt + completion
    weights = [0.0] * (len(prompt) - 1) + [weight] * len(completion)
    return tinker.types.Datum(
        model_input=tinker.types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": tinker.types.TensorData(data=tokens[1:], dtype="int64", shape=[len(tokens) - 1]),
            "weights": tinker.types.TensorData(data=weights, dtype="float32", shape=[len(weights)]),
        },
    )


@pytest.fixture(scope="module")
def training(service):
    return service.create_lora_training_client(base_model="tiny", rank=4).result()


def test_the_server_reports_its_base_models(tinker_url):
    rest = tinker.RestClient(base_url=tinker_url, api_key=API_KEY)
    models = rest.get_server_capabilities().result().supported_models
    assert [m.model_name for m in models] == ["tiny"]


def test_get_info_names_a_tokenizer_the_sdk_loads(training, tiny_model_path):
    info = training.get_info()
    assert info.model_data.tokenizer_id == str(tiny_model_path) and info.is_lora and info.lora_rank == 4
    assert training.get_tokenizer().encode("hello") == training.get_tokenizer().encode("hello")


def test_cross_entropy_is_roosts_sft_loss_on_the_same_batch(training, tiny_model_path, megatron_world):
    import torch

    from roost.trainer.losses import LossConfig, SampleTerms, policy_loss
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    batch = _batch()
    out = training.forward([_datum(p, c) for p, c in batch], "cross_entropy").result()
    samples = _samples(batch)
    policy = MegatronPolicy(TrainConfig(checkpoint=str(tiny_model_path), layout="flat"))
    ours = policy.logprobs(samples)
    for (prompt, _), output, expected in zip(batch, out.loss_fn_outputs, ours):
        sampled = output["logprobs"].to_numpy()[len(prompt) - 1 :]
        np.testing.assert_allclose(sampled, expected.numpy(), atol=1e-4)
    terms = [SampleTerms(lp, lp, lp, torch.zeros_like(lp), 1.0) for lp in ours]
    sft_loss, _ = policy_loss(terms, LossConfig(kind="sft"))
    assert out.metrics["loss:sum"] == pytest.approx(float(sft_loss), rel=1e-5)


def _samples(batch):
    from roost.rollout.store.samples import Sample

    return [
        Sample.from_turns([(p, c, [0.0] * len(c))], session_id=f"s{i}", group_id=f"g{i}")
        for i, (p, c) in enumerate(batch)
    ]


def tinker_lora_spec(rank: int = 4):
    """What `create_lora_training_client(rank=...)` trains by default: every projection and the
    unembedding, with Tinker's alpha 32."""
    from roost.rollout.lora import ATTENTION_TARGETS, MLP_TARGETS, LoraSpec

    return LoraSpec(rank=rank, alpha=32.0, targets=(*ATTENTION_TARGETS, *MLP_TARGETS, "lm_head"))


@pytest.mark.parametrize("kind", ["lora", "full"])
def test_a_step_trains_as_roosts_sft_step_on_the_same_batch(kind, request, tiny_model_path, megatron_world):
    """One forward_backward + optim_step through the SDK moves the weights as one SFT step of roost's
    trainer does, LoRA (rank 4, Tinker's alpha 32, seed 0) or full weight (`--full-weight`): with
    weights 1/N (roost's token mean) the gradients are the same, and so is Adam."""
    from roost.trainer.advantages import Scored
    from roost.trainer.losses import LossConfig
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    service = request.getfixturevalue("service" if kind == "lora" else "full_service")
    batch, probe = _batch(seed=4), _batch(seed=5)
    n = sum(len(c) for _, c in batch)
    training = service.create_lora_training_client(base_model="tiny", rank=4).result()
    assert training.get_info().is_lora == (kind == "lora")
    training.forward_backward([_datum(p, c, 1.0 / n) for p, c in batch], "cross_entropy").result()
    adam = tinker.types.AdamParams(learning_rate=1e-2, beta1=0.9, beta2=0.999, eps=1e-2, grad_clip_norm=1.0)
    training.optim_step(adam).result()

    config = TrainConfig(
        checkpoint=str(tiny_model_path),
        lr=1e-2,
        adam_betas=(0.9, 0.999),
        layout="flat",
        loss=LossConfig(kind="sft"),
        lora=tinker_lora_spec() if kind == "lora" else None,
    )
    policy = MegatronPolicy(config)
    for group in policy.optimizer.param_groups:
        group["eps"] = 1e-2
    policy.train_step([Scored(s, [0.0] * len(s.tokens)) for s in _samples(batch)])

    out = training.forward([_datum(p, c) for p, c in probe], "cross_entropy").result()
    for (prompt, _), output, expected in zip(probe, out.loss_fn_outputs, policy.logprobs(_samples(probe))):
        np.testing.assert_allclose(output["logprobs"].to_numpy()[len(prompt) - 1 :], expected.numpy(), atol=1e-4)


def test_forward_backward_and_optim_step_make_the_loss_fall(training):
    data = [_datum(p, c) for p, c in _batch(seed=1)]
    losses = []
    for _ in range(4):
        fwdbwd = training.forward_backward(data, "cross_entropy")
        step = training.optim_step(tinker.types.AdamParams(learning_rate=1e-2))
        losses.append(fwdbwd.result().metrics["loss:sum"])
        step.result()
    assert losses[-1] < losses[0] * 0.8, losses


def test_chunked_forward_backward_calls_step_as_one_call_of_the_whole_batch(service):
    """Gradients add up over calls until optim_step: two halves, then a step, train exactly as the
    whole batch in one call, then a step (Tinker sums the loss, so the halves add)."""
    data = [_datum(p, c) for p, c in _batch(seed=2)]
    # a large eps keeps Adam's first step smooth in the gradient, so summation order cannot flip it
    adam = tinker.types.AdamParams(learning_rate=1e-2, eps=1e-2)
    chunked, whole = (service.create_lora_training_client(base_model="tiny", rank=4).result() for _ in range(2))
    chunked.forward_backward(data[:1], "cross_entropy").result()
    chunked.forward_backward(data[1:], "cross_entropy").result()
    chunked.optim_step(adam).result()
    whole.forward_backward(data, "cross_entropy").result()
    whole.optim_step(adam).result()
    probe = [_datum(p, c) for p, c in _batch(seed=3)]
    after = [client.forward(probe, "cross_entropy").result() for client in (chunked, whole)]
    before = service.create_lora_training_client(base_model="tiny", rank=4).result().forward(probe, "cross_entropy")
    assert after[0].metrics["loss:sum"] != pytest.approx(before.result().metrics["loss:sum"], rel=1e-4)
    for a, b in zip(after[0].loss_fn_outputs, after[1].loss_fn_outputs):
        np.testing.assert_allclose(a["logprobs"].to_numpy(), b["logprobs"].to_numpy(), atol=2e-5)
