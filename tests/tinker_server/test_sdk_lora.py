"""LoRA training clients, saved states and tenants through the pinned SDK on `roost tinker serve`.

A LoRA client trains its adapters alone: its forward equals PEFT's on the Hugging Face base model
with the adapter the server saved for the sampler, and the engine samples that adapter.
`save_state` / `load_state_with_optimizer` resume exactly (weights and Adam's moments), and two
clients on one base model keep their own adapters and optimizers."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from .conftest import API_KEY, tinker_server
from .test_sdk_training import _batch, _datum

tinker = pytest.importorskip("tinker")

ADAM = tinker.types.AdamParams(learning_rate=1e-2, eps=1e-2)


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model_path):
    """The module's server, its temporary folders (the saved weights) under a folder the test reads."""
    temp = tmp_path_factory.mktemp("tinker-lora-tmp")
    with tinker_server(
        tmp_path_factory.mktemp("tinker-lora"), "--max-lora-rank", "16", env={"TMPDIR": str(temp)}
    ) as url:
        client = tinker.ServiceClient(base_url=url, api_key=API_KEY)
        yield url, client, temp
        client.close("success").result()


def _step(training, seed: int) -> None:
    training.forward_backward([_datum(p, c) for p, c in _batch(seed=seed)], "cross_entropy").result()
    training.optim_step(ADAM).result()


def _probe(training) -> list[np.ndarray]:
    out = training.forward([_datum(p, c) for p, c in _batch(seed=99)], "cross_entropy").result()
    return [o["logprobs"].to_numpy() for o in out.loss_fn_outputs]


def test_capabilities_report_lora_and_a_rank_past_the_limit_is_refused(server, tmp_path):
    url, service, _ = server
    # roost's own flags: the SDK's response model keeps only supported_models
    capabilities = httpx.get(f"{url}/api/v1/get_server_capabilities", headers={"X-API-Key": API_KEY}).json()
    assert (capabilities["lora"], capabilities["full_weight"]) == (True, False)
    with tinker_server(tmp_path, "--full-weight") as full_url:
        full = httpx.get(f"{full_url}/api/v1/get_server_capabilities", headers={"X-API-Key": API_KEY}).json()
        assert (full["lora"], full["full_weight"]) == (False, True)
    with pytest.raises(tinker.BadRequestError, match=r"LoRA rank 32 is past this server's limit of 16"):
        service.create_lora_training_client(base_model="tiny", rank=32).result()
    assert service.create_lora_training_client(base_model="tiny", rank=16).result().get_info().lora_rank == 16


def test_a_lora_client_trains_its_adapter_alone_as_peft_computes_it(server, tiny_model_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    _, service, temp = server
    training = service.create_lora_training_client(base_model="tiny", rank=4, train_unembed=False, seed=3).result()
    for seed in (1, 2):
        _step(training, seed)
    before = set(temp.rglob("adapter_config.json"))
    saved = training.save_weights_for_sampler("lora-check").result().path
    (adapter_config,) = set(temp.rglob("adapter_config.json")) - before
    adapter = adapter_config.parent
    # the engine samples the adapter on the base model: the save holds no merged weights
    assert not list(adapter.parent.glob("*.safetensors"))

    base = AutoModelForCausalLM.from_pretrained(tiny_model_path, torch_dtype=torch.float32)
    peft = PeftModel.from_pretrained(base, adapter).eval()
    assert "lm_head" not in str(peft.peft_config["default"].target_modules)
    batch = _batch(seed=99)
    ours = _probe(training)
    for (prompt, completion), got in zip(batch, ours):
        tokens = torch.tensor([prompt + completion])
        with torch.no_grad():
            logits = peft(tokens[:, :-1]).logits.float()
        expected = torch.log_softmax(logits, -1)[0].gather(-1, tokens[0, 1:, None])[:, 0]
        np.testing.assert_allclose(got, expected.numpy(), atol=1e-4)
        with torch.no_grad(), peft.disable_adapter():
            untrained = torch.log_softmax(peft(tokens[:, :-1]).logits.float(), -1)[0].gather(-1, tokens[0, 1:, None])
        assert np.abs(got - untrained[:, 0].numpy()).max() > 1e-3, "the adapter did not train"

    # the engine samples the adapter on the base model: its prompt logprobs are the trained model's
    sampler = service.create_sampling_client(model_path=saved)
    prompt, completion = batch[0]
    engine = sampler.compute_logprobs(tinker.types.ModelInput.from_ints(prompt + completion)).result()
    np.testing.assert_allclose(np.array(engine[1:], dtype=np.float32), ours[0], atol=1e-4)


def test_load_state_with_the_optimizer_resumes_exactly(server):
    _, service, _ = server
    training = service.create_lora_training_client(base_model="tiny", rank=4).result()
    _step(training, 1)
    _step(training, 2)
    path = training.save_state("two-steps").result().path
    assert path == f"tinker://{training.model_id}/weights/two-steps"
    _step(training, 3)
    resumed = _probe(training)

    training.load_state_with_optimizer(path).result()
    _step(training, 3)
    for a, b in zip(_probe(training), resumed):
        np.testing.assert_allclose(a, b, atol=1e-6)

    loaded = service.create_training_client_from_state_with_optimizer(path).result()
    assert loaded.get_info().lora_rank == 4
    _step(loaded, 3)
    for a, b in zip(_probe(loaded), resumed):
        np.testing.assert_allclose(a, b, atol=1e-6)

    # weights alone: a fresh Adam takes another third step (its first step has no moments), the
    # same whether loaded into a new client or into this one
    fresh = service.create_training_client_from_state(path).result()
    _step(fresh, 3)
    assert max(np.abs(a - b).max() for a, b in zip(_probe(fresh), resumed)) > 1e-4
    training.load_state(path).result()
    _step(training, 3)
    for a, b in zip(_probe(training), _probe(fresh)):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_a_state_that_is_not_saved_or_of_another_model_is_refused(server):
    _, service, _ = server
    training = service.create_lora_training_client(base_model="tiny", rank=4).result()
    with pytest.raises(tinker.NotFoundError, match="no saved state at 'tinker://nope/weights/x'"):
        service.create_training_client_from_state("tinker://nope/weights/x").result()
    path = training.save_state("rank-4").result().path
    with pytest.raises(tinker.BadRequestError, match="a state is saved at .* already"):
        training.save_state("rank-4").result()
    other = service.create_lora_training_client(base_model="tiny", rank=8).result()
    with pytest.raises(tinker.BadRequestError, match="load it with create_training_client_from_state instead"):
        other.load_state_with_optimizer(path).result()
    assert training.forward([_datum(*_batch()[0])], "cross_entropy").result().metrics["loss:sum"] > 0


def test_two_tenants_keep_their_own_adapter_and_optimizer(server):
    """A's steps, interleaved with B's, change nothing of B: B's logprobs stay put while A trains,
    and B's steps land where those of a client C that trained alone land."""
    _, service, _ = server
    a, b, c = (service.create_lora_training_client(base_model="tiny", rank=4).result() for _ in range(3))
    _step(b, 1)
    _step(c, 1)
    b_before = _probe(b)
    _step(a, 5)
    _step(a, 6)
    a_after = _probe(a)
    for x, y in zip(_probe(b), b_before):
        np.testing.assert_array_equal(x, y)
    _step(b, 2)
    _step(a, 7)
    _step(c, 2)
    for x, y in zip(_probe(b), _probe(c)):
        np.testing.assert_allclose(x, y, atol=1e-6)
    assert max(np.abs(x - y).max() for x, y in zip(a_after, b_before)) > 1e-3


def test_a_full_weight_state_resumes_exactly(full_service):
    training = full_service.create_lora_training_client(base_model="tiny", rank=4).result()
    _step(training, 1)
    path = training.save_state("one-step").result().path
    _step(training, 2)
    resumed = _probe(training)
    loaded = full_service.create_training_client_from_state_with_optimizer(path).result()
    assert not loaded.get_info().is_lora
    _step(loaded, 2)
    for a, b in zip(_probe(loaded), resumed):
        np.testing.assert_allclose(a, b, atol=1e-6)
