"""Two tenants (two API keys) on one `roost tinker serve`: each sees only its own sessions, models,
sampling sessions, checkpoints and futures. Tenant B naming tenant A's model, sampler or
checkpoint gets the 404 of a name the server does not know, and A's state is untouched: A's next
step gives exactly what the same step gives A's twin model, which B never named."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from .conftest import tinker_server
from .test_bad_input import _datum

tinker = pytest.importorskip("tinker")

KEY_A = "tml-tenant-a-key"
KEY_B = "tml-tenant-b-key"
NO_MODEL = r"no training model .* on this server"


@pytest.fixture(scope="module")
def url(tmp_path_factory, tiny_model_path):
    with tinker_server(tmp_path_factory.mktemp("tenants"), env={"ROOST_TINKER_KEY": f"{KEY_A} {KEY_B}"}) as url:
        yield url


@pytest.fixture(scope="module")
def tenants(url):
    a = tinker.ServiceClient(base_url=url, api_key=KEY_A)
    b = tinker.ServiceClient(base_url=url, api_key=KEY_B)
    yield a, b
    a.close("success").result()
    b.close("success").result()


def _step(training, data):
    training.forward_backward(data, "cross_entropy").result()
    training.optim_step(tinker.types.AdamParams(learning_rate=5e-2)).result()


def _intruder(b, victim):
    """B's SDK TrainingClient on A's model id: every request it makes carries B's key."""
    return tinker.TrainingClient(b.holder, 0, victim.model_id, info=victim.get_info())


def test_another_tenants_training_calls_are_unknown_to_it_and_change_nothing(tenants, url):
    a, b = tenants
    model = a.create_lora_training_client(base_model="tiny", rank=4, seed=3).result()
    twin = a.create_lora_training_client(base_model="tiny", rank=4, seed=3).result()
    data = [_datum([5, 6, 7, 8, 9]), _datum([11, 12, 13])]
    for training in (model, twin):
        _step(training, data)
        training.forward_backward(data, "cross_entropy").result()  # gradients waiting for the next step

    intruder = _intruder(b, model)
    with pytest.raises(tinker.NotFoundError, match=NO_MODEL):
        intruder.forward_backward([_datum([1, 2, 3, 4] * 8)], "cross_entropy").result()
    with pytest.raises(tinker.NotFoundError, match=NO_MODEL):
        intruder.optim_step(tinker.types.AdamParams(learning_rate=1.0)).result()
    with pytest.raises(tinker.NotFoundError, match=NO_MODEL):
        intruder.save_state("stolen").result()
    with pytest.raises(tinker.NotFoundError, match=NO_MODEL):
        intruder.save_weights_for_sampler("stolen").result()

    for training in (model, twin):
        training.optim_step(tinker.types.AdamParams(learning_rate=5e-2)).result()
    after = [t.forward(data, "cross_entropy").result() for t in (model, twin)]
    for got, want in zip(after[0].loss_fn_outputs, after[1].loss_fn_outputs):
        np.testing.assert_array_equal(got["logprobs"].to_numpy(), want["logprobs"].to_numpy())
    assert tinker.RestClient(base_url=url, api_key=KEY_A).list_checkpoints(model.model_id).result().checkpoints == []


def test_another_tenants_checkpoints_and_samplers_are_unknown_to_it(tenants, url):
    a, b = tenants
    model = a.create_lora_training_client(base_model="tiny", rank=4).result()
    state = model.save_state("mine").result().path
    weights = model.save_weights_for_sampler("mine").result().path
    sampler = a.create_sampling_client(model_path=weights).result()
    prompt = tinker.types.ModelInput.from_ints([3, 4, 5])
    greedy = tinker.types.SamplingParams(max_tokens=4, temperature=0.0)
    before = sampler.sample(prompt, 1, greedy).result().sequences[0].tokens

    with pytest.raises(tinker.NotFoundError, match="no saved state at"):
        b.create_training_client_from_state(state).result()
    with pytest.raises(tinker.NotFoundError, match="no saved sampler weights at"):
        b.create_sampling_client(model_path=weights).result()
    stolen = tinker.SamplingClient(b.holder, sampling_session_id=sampler._sampling_session_id, base_model="tiny")
    with pytest.raises(tinker.NotFoundError, match="no sampling session"):
        stolen.sample(prompt, 1, greedy).result()

    rest_b = tinker.RestClient(base_url=url, api_key=KEY_B)
    with pytest.raises(tinker.NotFoundError, match="no training run"):
        rest_b.get_training_run(model.model_id).result()
    with pytest.raises(tinker.NotFoundError, match="no training run"):
        rest_b.delete_checkpoint_from_tinker_path(state).result()
    assert model.model_id not in [r.training_run_id for r in rest_b.list_training_runs().result().training_runs]
    assert state not in [c.tinker_path for c in rest_b.list_user_checkpoints().result().checkpoints]

    listed = tinker.RestClient(base_url=url, api_key=KEY_A).list_checkpoints(model.model_id).result().checkpoints
    assert sorted(c.tinker_path for c in listed) == sorted([state, weights])
    assert sampler.sample(prompt, 1, greedy).result().sequences[0].tokens == before


def test_another_tenants_futures_and_sessions_are_unknown_to_it(tenants, url):
    a, b = tenants
    model = a.create_lora_training_client(base_model="tiny", rank=4).result()
    submitted = httpx.post(
        f"{url}/api/v1/optim_step",
        json={"model_id": model.model_id, "adam_params": {"learning_rate": 1e-3}},
        headers={"X-API-Key": KEY_A},
    ).json()
    stolen = httpx.post(
        f"{url}/api/v1/retrieve_future", json={"request_id": submitted["request_id"]}, headers={"X-API-Key": KEY_B}
    )
    assert stolen.status_code == 404 and "no pending request" in stolen.json()["detail"]
    finish = httpx.post(
        f"{url}/api/v1/sessions/{a.holder.get_session_id()}/finish",
        json={"reason": {"type": "success"}},
        headers={"X-API-Key": KEY_B},
    )
    assert finish.status_code == 404 and "no session" in finish.json()["detail"]
    mine = httpx.post(
        f"{url}/api/v1/retrieve_future", json={"request_id": submitted["request_id"]}, headers={"X-API-Key": KEY_A}
    ).json()
    assert "no gradients accumulated" in mine["error"]  # A's own answer, which B's poll did not take
    assert model.forward([_datum([1, 2, 3])], "cross_entropy").result().metrics["loss:sum"] > 0
