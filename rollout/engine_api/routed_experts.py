"""Routed experts on the wire (R3, rollout routing replay): which experts each token of a
mixture-of-experts model went to, per layer, as the engine computed them.

SGLang's format (`return_routed_experts` on `/generate`; `meta_info["routed_experts"]`): base64 of
a little-endian int32 array in C order, shaped [tokens, layers, top_k], with no shape on the wire.
Its rows are the tokens run through the model, from `routed_experts_start_len` (0: the prompt's
first token) to the last but one of prompt and output together: the last sampled token was never
fed back. A layer with a dense MLP has -1 in its columns. The engine encodes with `encode`; the
client decodes with `RoutedExperts.decode`, which knows the row count from the answer's token
counts, and the reader reshapes the columns by the model's layers (`per_layer`).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

import numpy as np

WIRE_DTYPE = np.dtype("<i4")


def encode(experts: np.ndarray) -> str:
    """[tokens, layers, top_k] expert ids → SGLang's base64 string."""
    return base64.b64encode(np.ascontiguousarray(experts, dtype=WIRE_DTYPE).tobytes()).decode("ascii")


class MalformedRoutedExperts(ValueError):
    """A `routed_experts` value that is not SGLang's encoding of the rows it should hold."""


@dataclass(frozen=True)
class RoutedExperts:
    """The routed experts of an answer's tokens: row i is the token at position `start + i`."""

    start: int
    ids: np.ndarray
    """[tokens, layers * top_k] int32; `per_layer` splits the columns."""

    @property
    def tokens(self) -> int:
        return int(self.ids.shape[0])

    def per_layer(self, layers: int) -> np.ndarray:
        """[tokens, layers, top_k], for a model of `layers` layers."""
        if self.ids.shape[1] % layers:
            raise MalformedRoutedExperts(f"{self.ids.shape[1]} expert ids per token do not split into {layers} layers")
        return self.ids.reshape(self.tokens, layers, -1)

    def encode(self) -> str:
        return encode(self.ids)

    @classmethod
    def decode(cls, data: str, rows: int, start: int = 0) -> RoutedExperts:
        """SGLang's base64 string of `rows` tokens' expert ids (positions `start`..)."""
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise MalformedRoutedExperts(f"routed_experts is not base64: {exc}") from exc
        count, rest = divmod(len(raw), WIRE_DTYPE.itemsize)
        if rest or rows <= 0 or count % rows:
            raise MalformedRoutedExperts(
                f"routed_experts holds {len(raw)} bytes: not int32 expert ids for {rows} tokens "
                "(expected tokens x layers x top_k of them)"
            )
        return cls(start, np.frombuffer(raw, dtype=WIRE_DTYPE).astype(np.int32).reshape(rows, count // rows))
