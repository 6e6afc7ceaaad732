"""The SDK's RestClient on `roost tinker serve`: a training run (a model) with its base model,
LoRA rank and last checkpoints; its checkpoints and the tenant's, listed and deleted. A deleted
checkpoint's files are gone: loading it or sampling from it then gets a 404 that says so."""

from __future__ import annotations

import pytest

from .conftest import API_KEY
from .test_bad_input import _datum

tinker = pytest.importorskip("tinker")

GREEDY = tinker.types.SamplingParams(max_tokens=4, temperature=0.0)
PROMPT = tinker.types.ModelInput.from_ints([3, 4, 5])


@pytest.fixture(scope="module")
def rest(tinker_url):
    return tinker.RestClient(base_url=tinker_url, api_key=API_KEY)


@pytest.fixture(scope="module")
def run(service):
    """A trained model with a saved state and named sampler weights: (client, state path, weights path)."""
    training = service.create_lora_training_client(base_model="tiny", rank=4).result()
    training.forward_backward([_datum([5, 6, 7, 8])], "cross_entropy").result()
    training.optim_step(tinker.types.AdamParams(learning_rate=1e-2)).result()
    state = training.save_state("step-1").result().path
    weights = training.save_weights_for_sampler("step-1").result().path
    return training, state, weights


def test_a_training_run_is_its_model_with_its_last_checkpoints(rest, run):
    training, state, weights = run
    got = rest.get_training_run(training.model_id).result()
    assert (got.training_run_id, got.base_model, got.is_lora, got.lora_rank) == (training.model_id, "tiny", True, 4)
    assert got.last_checkpoint.tinker_path == state and got.last_checkpoint.checkpoint_type == "training"
    assert got.last_sampler_checkpoint.tinker_path == weights
    assert rest.get_training_run_by_tinker_path(state).result().training_run_id == training.model_id
    listed = rest.list_training_runs(limit=100).result()
    assert training.model_id in [r.training_run_id for r in listed.training_runs]
    assert listed.cursor.total_count == len(listed.training_runs)
    info = rest.get_weights_info_by_tinker_path(state).result()
    assert (info.base_model, info.is_lora, info.lora_rank, info.train_mlp) == ("tiny", True, 4, True)


def test_checkpoints_are_listed_per_run_and_per_user(rest, run):
    training, state, weights = run
    listed = rest.list_checkpoints(training.model_id).result().checkpoints
    assert [(c.checkpoint_id, c.checkpoint_type, c.tinker_path) for c in listed] == [
        ("weights/step-1", "training", state),
        ("sampler_weights/step-1", "sampler", weights),
    ]
    assert all(c.size_bytes > 10_000 for c in listed)  # an adapter (and Adam's state) or merged weights
    assert {state, weights} <= {c.tinker_path for c in rest.list_user_checkpoints().result().checkpoints}


def test_a_deleted_checkpoint_is_gone_and_says_so(service, rest):
    training = service.create_lora_training_client(base_model="tiny", rank=4).result()
    state = training.save_state("doomed").result().path
    weights = training.save_weights_for_sampler("doomed").result().path
    sampler = service.create_sampling_client(model_path=weights).result()
    sampler.sample(PROMPT, 1, GREEDY).result()

    rest.delete_checkpoint_from_tinker_path(weights).result()
    rest.delete_checkpoint(training.model_id, "weights/doomed").result()

    assert rest.list_checkpoints(training.model_id).result().checkpoints == []
    with pytest.raises(tinker.NotFoundError, match="were deleted"):
        sampler.sample(PROMPT, 1, GREEDY).result()
    with pytest.raises(tinker.NotFoundError, match="was deleted"):
        service.create_sampling_client(model_path=weights).result()
    with pytest.raises(tinker.NotFoundError, match="was deleted"):
        training.load_state(state).result()
    with pytest.raises(tinker.NotFoundError, match="was deleted"):
        rest.delete_checkpoint_from_tinker_path(state).result()
    assert training.forward([_datum([1, 2, 3])], "cross_entropy").result().metrics["loss:sum"] > 0


def test_a_bad_checkpoint_id_or_publishing_gets_a_400(rest, run):
    training, state, _ = run
    with pytest.raises(tinker.BadRequestError, match="neither weights/<name> nor sampler_weights/<name>"):
        rest.delete_checkpoint(training.model_id, "other/step-1").result()
    with pytest.raises(tinker.BadRequestError, match="publishing checkpoints is not served"):
        rest.publish_checkpoint_from_tinker_path(state).result()
    assert [c.tinker_path for c in rest.list_checkpoints(training.model_id).result().checkpoints][0] == state
