"""The store's packing of routed experts: the wire's ids back exactly, in one byte an id."""

from __future__ import annotations

import numpy as np
import pytest

from roost.rollout.engine_api.routed_experts import RoutedExperts, encode
from roost.rollout.store.routing_blob import MalformedRoutingBlob, pack, unpack


def test_wire_routing_packs_to_a_byte_an_id_and_back():
    rng = np.random.default_rng(0)
    wire = rng.integers(0, 8, size=(37, 2, 2), dtype=np.int32)
    wire[:, 0, :] = -1  # a dense first layer, as the wire writes it
    routed = RoutedExperts.decode(encode(wire), rows=37)
    blob = pack(routed.ids)
    assert len(blob) == 5 + 37 * 4
    back = unpack(blob)
    assert back is not None and back.dtype == np.int32
    np.testing.assert_array_equal(back, routed.ids)
    np.testing.assert_array_equal(back.reshape(37, 2, 2), wire)


def test_many_experts_take_two_bytes():
    ids = np.array([[0, 300], [511, -1]], dtype=np.int32)
    blob = pack(ids)
    assert len(blob) == 5 + 4 * 2
    np.testing.assert_array_equal(unpack(blob), ids)


def test_nothing_recorded_and_malformed_blobs():
    assert unpack(b"") is None
    with pytest.raises(MalformedRoutingBlob, match="no header"):
        unpack(b"\x01")
    with pytest.raises(MalformedRoutingBlob, match="whole tokens"):
        unpack(pack(np.zeros((3, 4), dtype=np.int32))[:-1])
    with pytest.raises(MalformedRoutingBlob, match="width 3"):
        unpack(b"\x03\x04\x00\x00\x00")
    with pytest.raises(ValueError, match="below -1"):
        pack(np.array([[-2]], dtype=np.int32))
    with pytest.raises(ValueError, match="does not fit"):
        pack(np.array([[70000]], dtype=np.int32))
