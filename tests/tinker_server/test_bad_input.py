"""Bad input to `roost tinker serve` gets a precise error in the shape the SDK reports (an HTTP 4xx
whose detail says what to do, or a failed future the SDK raises as `RequestFailedError`), and the
server keeps serving: each test ends with a request that works."""

from __future__ import annotations

import httpx
import pytest

from .conftest import API_KEY

tinker = pytest.importorskip("tinker")

HEADERS = {"X-API-Key": API_KEY}


def _datum(tokens: list[int], targets: list[int] | None = None, weights: list[float] | None = None):
    targets = targets if targets is not None else tokens[1:] + [tokens[0]]
    inputs = {"target_tokens": tinker.types.TensorData(data=targets, dtype="int64", shape=[len(targets)])}
    if weights is not None:
        inputs["weights"] = tinker.types.TensorData(data=weights, dtype="float32", shape=[len(weights)])
    return tinker.types.Datum(model_input=tinker.types.ModelInput.from_ints(tokens), loss_fn_inputs=inputs)


@pytest.fixture(scope="module")
def training(service):
    return service.create_lora_training_client(base_model="tiny", rank=4).result()


def _still_serves(training) -> None:
    out = training.forward([_datum([1, 2, 3])], "cross_entropy").result()
    assert out.loss_fn_outputs[0]["logprobs"].to_numpy().shape == (3,)


def test_an_unknown_base_model_is_refused(service, training):
    with pytest.raises(tinker.BadRequestError, match=r"unknown base_model 'Qwen/Nope'.*trains \['tiny'\]"):
        service.create_lora_training_client(base_model="Qwen/Nope", rank=4).result()
    _still_serves(training)


def test_optim_step_with_nothing_accumulated_fails_its_future(training):
    training.forward([_datum([1, 2, 3])], "cross_entropy").result()  # forward alone adds no gradient
    with pytest.raises(tinker.RequestFailedError, match="no gradients accumulated; call forward_backward first"):
        training.optim_step(tinker.types.AdamParams(learning_rate=1e-3)).result()
    _still_serves(training)


def test_targets_and_weights_of_other_lengths_fail_the_call(training):
    with pytest.raises(tinker.RequestFailedError, match="3 input tokens but 2 target_tokens and 3 weights"):
        training.forward_backward([_datum([1, 2, 3], targets=[2, 3], weights=[1, 1, 1])], "cross_entropy").result()
    _still_serves(training)


def test_a_datum_longer_than_the_context_is_refused(tinker_url, training):
    context = tinker.RestClient(base_url=tinker_url, api_key=API_KEY).get_server_capabilities().result()
    length = context.supported_models[0].max_context_length
    with pytest.raises(
        tinker.BadRequestError, match=f"datum 0 has {length + 1} tokens; the model's context is {length}"
    ):
        training.forward([_datum([1] * (length + 1))], "cross_entropy").result()
    _still_serves(training)


def test_a_model_id_this_server_never_made_is_not_found(tinker_url, training):
    body = {"adam_params": {"learning_rate": 1e-3}, "model_id": "ses-someone-else:train:0"}
    reply = httpx.post(f"{tinker_url}/api/v1/optim_step", json=body, headers=HEADERS)
    assert reply.status_code == 404 and "no training model 'ses-someone-else:train:0'" in reply.json()["detail"]
    _still_serves(training)


def test_a_json_body_out_of_range_names_the_field(tinker_url, training):
    body = {"adam_params": {"learning_rate": -1.0}, "model_id": training.model_id}
    reply = httpx.post(f"{tinker_url}/api/v1/optim_step", json=body, headers=HEADERS)
    assert reply.status_code == 400
    assert "adam_params.learning_rate: Input should be greater than or equal to 0" in reply.json()["detail"]
    unknown = httpx.post(f"{tinker_url}/api/v1/get_info", json={"model_id": "x", "colour": 1}, headers=HEADERS)
    assert unknown.status_code == 400 and "colour: Extra inputs are not permitted" in unknown.json()["detail"]
    _still_serves(training)


def test_a_malformed_protobuf_is_refused(tinker_url, training):
    reply = httpx.post(
        f"{tinker_url}/api/v1/forward_backward",
        content=b"\xff\xff\xff\xff",
        headers={**HEADERS, "Content-Type": "application/x-protobuf"},
    )
    assert reply.status_code == 400 and "not a ForwardBackwardRequest protobuf" in reply.json()["detail"]
    _still_serves(training)


def test_a_wrong_api_key_is_refused(tinker_url, training):
    reply = httpx.post(
        f"{tinker_url}/api/v1/get_info", json={"model_id": training.model_id}, headers={"X-API-Key": "tml-wrong"}
    )
    assert reply.status_code == 401 and "wrong API key" in reply.json()["detail"]
    _still_serves(training)


def test_a_named_save_samples_from_its_tinker_path(service, training):
    path = training.save_weights_for_sampler("first").result().path
    assert path == f"tinker://{training.model_id}/sampler_weights/first"
    sampler = service.create_sampling_client(model_path=path).result()
    params = tinker.types.SamplingParams(max_tokens=2, temperature=0.0, stop=[])
    assert (
        len(sampler.sample(tinker.types.ModelInput.from_ints([1, 2, 3]), 1, params).result().sequences[0].tokens) == 2
    )
    with pytest.raises(tinker.NotFoundError, match="no saved sampler weights"):
        service.create_sampling_client(model_path=f"tinker://{training.model_id}/sampler_weights/never").result()


def test_a_retried_retrieve_future_gets_the_same_answer(tinker_url, training):
    """The SDK retries a poll whose answer it lost (a dropped connection): the outcome it was
    already handed stays retrievable, not a 404 `no pending request`."""
    from tinker.proto.request_conv import forward_backward_request_to_proto

    request = tinker.types.ForwardBackwardRequest(
        forward_backward_input=tinker.types.ForwardBackwardInput(data=[_datum([4, 5, 6])], loss_fn="cross_entropy"),
        model_id=training.model_id,
        seq_id=1,
    )
    proto = forward_backward_request_to_proto(request)
    proto.forward_only = True
    headers = {**HEADERS, "Content-Type": "application/x-protobuf"}
    reply = httpx.post(f"{tinker_url}/api/v1/forward_backward", content=proto.SerializeToString(), headers=headers)
    assert reply.status_code == 200, reply.text

    def poll() -> httpx.Response:
        return httpx.post(
            f"{tinker_url}/api/v1/retrieve_future",
            json={"request_id": reply.json()["request_id"]},
            headers={**HEADERS, "Accept": "application/x-protobuf"},
            timeout=60,
        )

    first, again = poll(), poll()
    assert first.status_code == again.status_code == 200, again.text
    assert first.content == again.content
    _still_serves(training)
