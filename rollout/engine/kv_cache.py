"""A slot KV cache: one preallocated row per running request.

Each request owns a slot for its lifetime; its keys and values live at positions
0..length-1 of that slot. Slots are handed out and returned between decode steps, which
is what lets requests join and leave a running batch.
"""

from __future__ import annotations

import torch


class CacheFull(RuntimeError):
    """Every slot is taken."""


class SlotKVCache:
    def __init__(self, *, layers: int, slots: int, kv_heads: int, max_len: int, head_dim: int, dtype):
        shape = (layers, slots, kv_heads, max_len, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype)
        self.values = torch.zeros(shape, dtype=dtype)
        self.max_len = max_len
        self._free = list(range(slots - 1, -1, -1))

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def acquire(self) -> int:
        if not self._free:
            raise CacheFull("no free KV cache slot")
        return self._free.pop()

    def release(self, slot: int) -> None:
        self._free.append(slot)

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
