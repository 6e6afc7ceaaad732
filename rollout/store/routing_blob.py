"""A call's routed experts as the trajectory store keeps them (R3, rollout routing replay).

The wire's encoding (`roost.rollout.engine_api.routed_experts`) spends a base64 int32 on each
expert id; a store of long agent episodes holds tokens x layers x top_k of them per call, so the
store packs them into the narrowest unsigned integer that holds them: one byte per id for models
of up to 254 experts (every MoE checkpoint roost serves), two beyond. Ids are stored plus one, so
that a dense layer's -1 is 0. The blob starts with a 5-byte header: the width in bytes (1 or 2)
and the ids per token (layers x top_k, uint32 little-endian); b"" means nothing was recorded.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

_HEADER = struct.Struct("<BI")
_WIDTHS: dict[int, np.dtype[Any]] = {1: np.dtype("u1"), 2: np.dtype("<u2")}


class MalformedRoutingBlob(ValueError):
    """Bytes that are not a routing blob `pack` wrote."""


def pack(ids: np.ndarray) -> bytes:
    """[tokens, layers * top_k] expert ids (-1: a dense layer) → the stored blob."""
    if ids.ndim != 2:
        raise ValueError(f"routed experts are [tokens, layers x top_k], not shape {ids.shape}")
    shifted = ids.astype(np.int64) + 1
    if shifted.size and shifted.min() < 0:
        raise ValueError(f"an expert id below -1 ({int(shifted.min()) - 1}) is no routing")
    top = int(shifted.max()) if shifted.size else 0
    if top > np.iinfo(np.uint16).max:
        raise ValueError(f"expert id {top - 1} does not fit the store's two bytes")
    width = 1 if top <= np.iinfo(np.uint8).max else 2
    return _HEADER.pack(width, ids.shape[1]) + bytes(shifted.astype(_WIDTHS[width]).tobytes())


def unpack(blob: bytes) -> np.ndarray | None:
    """The stored blob → [tokens, layers * top_k] int32 expert ids; None when none was recorded."""
    if not blob:
        return None
    if len(blob) < _HEADER.size:
        raise MalformedRoutingBlob(f"a routing blob of {len(blob)} bytes has no header")
    width, per_token = _HEADER.unpack_from(blob)
    dtype = _WIDTHS.get(width)
    if dtype is None or per_token == 0:
        raise MalformedRoutingBlob(f"a routing blob's header names width {width} and {per_token} ids per token")
    body = len(blob) - _HEADER.size
    if body % (width * per_token):
        raise MalformedRoutingBlob(f"{body} bytes are not whole tokens of {per_token} ids of {width} bytes")
    values: np.ndarray = np.frombuffer(blob, dtype=dtype, offset=_HEADER.size).astype(np.int32) - 1
    return values.reshape(-1, per_token)
