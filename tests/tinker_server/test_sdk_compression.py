"""forward_backward bodies compressed with zstd, as the SDK sends them when the server's client
config asks (`--compress-fwdbwd`), decode to the same call as plain ones."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import zstandard

from .conftest import API_KEY
from .test_bad_input import HEADERS, _datum

tinker = pytest.importorskip("tinker")


@pytest.fixture(scope="module")
def training(service):
    return service.create_lora_training_client(base_model="tiny", rank=4).result()


def test_a_zstd_compressed_body_is_decoded(tinker_url, training):
    from tinker.proto.request_conv import forward_backward_request_to_proto

    request = tinker.types.ForwardBackwardRequest(
        forward_backward_input=tinker.types.ForwardBackwardInput(data=[_datum([4, 5, 6])], loss_fn="cross_entropy"),
        model_id=training.model_id,
        seq_id=1,
    )
    proto = forward_backward_request_to_proto(request)
    proto.forward_only = True
    headers = {**HEADERS, "Content-Type": "application/x-protobuf", "Content-Encoding": "zstd"}
    body = zstandard.ZstdCompressor().compress(proto.SerializeToString())
    reply = httpx.post(f"{tinker_url}/api/v1/forward_backward", content=body, headers=headers)
    assert reply.status_code == 200, reply.text
    result = httpx.post(
        f"{tinker_url}/api/v1/retrieve_future",
        json={"request_id": reply.json()["request_id"]},
        headers={**HEADERS, "Accept": "application/x-protobuf"},
        timeout=60,
    )
    from tinker.proto.response_conv import deserialize_forward_backward_output

    logprobs = deserialize_forward_backward_output(result.content).loss_fn_outputs[0]["logprobs"].to_numpy()
    expected = training.forward([_datum([4, 5, 6])], "cross_entropy").result().loss_fn_outputs[0]["logprobs"]
    np.testing.assert_allclose(logprobs, expected.to_numpy(), atol=1e-6)


def test_the_sdk_compresses_bodies_when_the_server_asks(tmp_path, tiny_model_path):
    from .conftest import tinker_server

    with tinker_server(tmp_path, "--compress-fwdbwd") as url:
        client = tinker.ServiceClient(base_url=url, api_key=API_KEY)
        assert client.holder.get_client_config().proto_compress_fwdbwd
        training = client.create_lora_training_client(base_model="tiny", rank=4).result()
        out = training.forward_backward([_datum([1, 2, 3])], "cross_entropy").result()
        assert out.metrics["loss:sum"] > 0
        assert training.optim_step(tinker.types.AdamParams(learning_rate=1e-3)).result() is not None
        client.close("success").result()
