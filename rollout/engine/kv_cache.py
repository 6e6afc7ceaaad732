"""A slot KV cache: one preallocated row per running request, with prefix reuse.

Each request owns a slot for its lifetime; its keys and values live at positions
0..length-1 of that slot. Slots are handed out and returned between decode steps, which
is what lets requests join and leave a running batch.

A returned slot keeps its keys and values, and the cache remembers which tokens they are
(the request's prompt and all but its last sampled token). A new request is given the free
slot holding the longest prefix of its prompt and prefills only the rest: an agent's next
turn extends its previous call, so each turn computes just the new messages (SGLang's
radix cache does this by tree; one path per slot is enough for multi-turn rollouts). New
weights make every kept prefix stale: `forget` drops them, and slots in use when it is
called come back empty. A prefix is reused only by a request of the same `owner` (the LoRA
adapter its keys and values were computed with).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import torch

_NOTHING = np.zeros(0, dtype=np.int64)


class CacheFull(RuntimeError):
    """Every slot is taken."""


class SlotKVCache:
    def __init__(
        self, *, layers: int, slots: int, kv_heads: int, max_len: int, head_dim: int, dtype, reuse_prefixes: bool = True
    ):
        shape = (layers, slots, kv_heads, max_len, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype)
        self.values = torch.zeros(shape, dtype=dtype)
        self.max_len = max_len
        self.reuse_prefixes = reuse_prefixes
        self._free: OrderedDict[int, np.ndarray] = OrderedDict((slot, _NOTHING) for slot in range(slots))
        """free slot → the tokens whose keys and values it still holds (least recently used first)"""
        self._owners: dict[int, int] = {}
        """slot → the owner whose keys and values it holds"""
        self._current: dict[int, bool] = {}
        """slot in use → whether its keys and values are of the current weights"""

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def acquire(self, prompt: Sequence[int] = (), owner: int = 0) -> tuple[int, int]:
        """A free slot, and how many leading tokens of `prompt` it already holds for `owner` (always
        fewer than all of them: the last prompt token is run again for its logits)."""
        if not self._free:
            raise CacheFull("no free KV cache slot")
        slot, held = next(iter(self._free)), 0
        if self.reuse_prefixes and len(prompt) > 1:
            wanted = np.asarray(prompt, dtype=np.int64)
            for candidate, tokens in self._free.items():
                if self._owners.get(candidate, 0) != owner:
                    continue
                length = _common_prefix(tokens, wanted)
                if length > held:
                    slot, held = candidate, length
        del self._free[slot]
        self._current[slot] = True
        self._owners[slot] = owner
        return slot, min(held, len(prompt) - 1)

    def release(self, slot: int, tokens: Sequence[int] = ()) -> None:
        """Return `slot`; `tokens` are those whose keys and values it holds, for reuse."""
        current = self._current.pop(slot, False)
        self._free[slot] = np.asarray(tokens, dtype=np.int64) if current and self.reuse_prefixes else _NOTHING

    def forget(self) -> None:
        """The weights changed: no keys or values computed so far may be reused."""
        for slot in self._free:
            self._free[slot] = _NOTHING
        for slot in self._current:
            self._current[slot] = False

    def write_span(self, layer: int, slot: int, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        # k, v: [kv_heads, T, D]
        end = start + k.shape[1]
        self.keys[layer, slot, :, start:end] = k
        self.values[layer, slot, :, start:end] = v

    def read_span(self, layer: int, slot: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.keys[layer, slot, :, :end], self.values[layer, slot, :, :end]

    def write_tokens(self, layer: int, slots, positions, k: torch.Tensor, v: torch.Tensor) -> None:
        # k, v: [B, kv_heads, D], one token per slot at its own position.
        self.keys[layer, slots, :, positions] = k
        self.values[layer, slots, :, positions] = v

    def gather(self, layer: int, slots, span: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.keys[layer, slots, :, :span], self.values[layer, slots, :, :span]


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    if n == 0 or a[0] != b[0]:
        return 0
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n
