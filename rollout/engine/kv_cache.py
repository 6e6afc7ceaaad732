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

Programs (`budget_tokens` set): a request may name its `session` (an agent's episode: many calls,
a tool wait between them). Its slot is then *retained* for that session when the request ends:
no other request takes it while a free slot is left, and the session's next call finds its
prefix there. Retained slots hold at most `budget_tokens` tokens together; past that, and when a
request finds no free slot, a whole program is evicted: the session predicted to return last
(its last call's end plus its mean wait between calls). `close(session)` releases a session's
slots at once (the gateway finished it). Counters: prompt and cached tokens (the hit rate),
evicted tokens, and re-prefilled tokens (a session's prompt tokens it held before an eviction
and had to prefill again).

A mixture-of-experts model's cache (`top_k` set) also keeps each cached token's routed experts
per layer, beside its keys and values and reused with them: the routing a request's answer
reports for a reused prefix is the one computed when that prefix ran (SGLang keeps them by
KV location the same way).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

_NOTHING = np.zeros(0, dtype=np.int64)


class CacheFull(RuntimeError):
    """Every slot is taken."""


@dataclass
class _Held:
    """A slot retained for a session between its calls."""

    session: str
    tokens: np.ndarray
    released_at: float


@dataclass
class SessionStats:
    """What the cache counts, for `/metrics` and the benchmark."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    evicted_tokens: int = 0
    evicted_programs: int = 0
    reprefilled_tokens: int = 0
    closed_sessions: int = 0


class SlotKVCache:
    def __init__(
        self,
        *,
        layers: int,
        slots: int,
        kv_heads: int,
        max_len: int,
        head_dim: int,
        dtype,
        reuse_prefixes: bool = True,
        budget_tokens: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        top_k: int = 0,
    ):
        """`budget_tokens`: retain sessions' slots between their calls, holding at most this many
        tokens together (None: no session is retained; every free slot is reused by recency).
        `top_k`: keep each token's `top_k` routed experts per layer (0: a dense model, none)."""
        shape = (layers, slots, kv_heads, max_len, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype)
        self.values = torch.zeros(shape, dtype=dtype)
        # int16: expert ids below 32,768 (Qwen3-MoE has 128); -1 where a layer is dense
        self.experts = torch.full((slots, max_len, layers, top_k), -1, dtype=torch.int16) if top_k else None
        self.max_len = max_len
        self.slots = slots
        self.reuse_prefixes = reuse_prefixes
        self.budget_tokens = budget_tokens if reuse_prefixes else None
        self.stats = SessionStats()
        self._clock = clock
        self._free: OrderedDict[int, np.ndarray] = OrderedDict((slot, _NOTHING) for slot in range(slots))
        """free slot → the tokens whose keys and values it still holds (least recently used first)"""
        self._held: dict[int, _Held] = {}
        """slot retained for a session between its calls → what it holds for whom"""
        self._owners: dict[int, int] = {}
        """slot → the owner whose keys and values it holds"""
        self._current: dict[int, bool] = {}
        """slot in use → whether its keys and values are of the current weights"""
        self._gaps: dict[str, float] = {}
        """session → its mean wait between one call's end and the next one's start (seconds)"""
        self._last_end: dict[str, float] = {}
        self._lost: dict[str, np.ndarray] = {}
        """session → the tokens an eviction took from it (to count what it prefills again)"""

    @property
    def free_slots(self) -> int:
        """Slots a request can take now: free ones, and retained ones (whose program is evicted)."""
        return len(self._free) + len(self._held)

    @property
    def retained_tokens(self) -> int:
        return sum(len(h.tokens) for h in self._held.values())

    @property
    def retained_sessions(self) -> int:
        return len({h.session for h in self._held.values()})

    def acquire(self, prompt: Sequence[int] = (), owner: int = 0, session: str | None = None) -> tuple[int, int]:
        """A free slot, and how many leading tokens of `prompt` it already holds for `owner` (always
        fewer than all of them: the last prompt token is run again for its logits). A session's
        call takes the slot retained for it where one holds a prefix of `prompt`."""
        if not self.free_slots:
            raise CacheFull("no free KV cache slot")
        wanted = np.asarray(prompt, dtype=np.int64)
        now = self._clock()
        if session is not None and session in self._last_end:
            gap = now - self._last_end.pop(session)
            self._gaps[session] = gap if session not in self._gaps else 0.5 * (self._gaps[session] + gap)
        slot, held = self._own_slot(session, wanted, owner) if session is not None else (None, 0)
        if slot is None:
            if not self._free:
                self._evict(self._last_to_return())
            slot, held = self._best_free(wanted, owner)
            del self._free[slot]
        else:
            del self._held[slot]
        self._current[slot] = True
        self._owners[slot] = owner
        cached = min(held, len(prompt) - 1) if len(prompt) else 0
        self._count(session, wanted, cached)
        return slot, cached

    def release(self, slot: int, tokens: Sequence[int] = (), session: str | None = None) -> None:
        """Return `slot`; `tokens` are those whose keys and values it holds, for reuse (for
        `session` alone while the budget allows, when there is one)."""
        current = self._current.pop(slot, False)
        kept = np.asarray(tokens, dtype=np.int64) if current and self.reuse_prefixes else _NOTHING
        if session is None or self.budget_tokens is None or not len(kept):
            self._free[slot] = kept
            return
        now = self._clock()
        self._held[slot] = _Held(session, kept, now)
        self._last_end[session] = now
        while self._held and self.retained_tokens > self.budget_tokens:
            self._evict(self._last_to_return())

    def close(self, session: str) -> int:
        """The session is over: its retained slots become free (reused first); the tokens freed."""
        freed = 0
        for slot in [s for s, h in self._held.items() if h.session == session]:
            freed += len(self._held.pop(slot).tokens)
            self._free[slot] = _NOTHING
            self._free.move_to_end(slot, last=False)
        self._gaps.pop(session, None)
        self._last_end.pop(session, None)
        self._lost.pop(session, None)
        self.stats.closed_sessions += 1
        return freed

    def forget(self) -> None:
        """The weights changed: no keys or values computed so far may be reused."""
        for slot in list(self._held):
            del self._held[slot]
            self._free[slot] = _NOTHING
        for slot in self._free:
            self._free[slot] = _NOTHING
        for slot in self._current:
            self._current[slot] = False
        self._lost.clear()

    def _own_slot(self, session: str, wanted: np.ndarray, owner: int) -> tuple[int | None, int]:
        best, held = None, 0
        for slot, h in self._held.items():
            if h.session != session or self._owners.get(slot, 0) != owner:
                continue
            length = _common_prefix(h.tokens, wanted)
            if length > held:
                best, held = slot, length
        return best, held

    def _best_free(self, wanted: np.ndarray, owner: int) -> tuple[int, int]:
        slot, held = next(iter(self._free)), 0
        if self.reuse_prefixes and len(wanted) > 1:
            for candidate, tokens in self._free.items():
                if self._owners.get(candidate, 0) != owner:
                    continue
                length = _common_prefix(tokens, wanted)
                if length > held:
                    slot, held = candidate, length
        return slot, held

    def _last_to_return(self) -> str:
        """The retained session predicted to call again last: its last call's end plus its mean wait
        (a session not seen waiting yet: the mean over those that were)."""
        typical = sum(self._gaps.values()) / len(self._gaps) if self._gaps else 0.0
        ends: dict[str, float] = {}
        for h in self._held.values():
            ends[h.session] = max(ends.get(h.session, h.released_at), h.released_at)
        return max(ends, key=lambda s: (ends[s] + self._gaps.get(s, typical), s))

    def _evict(self, session: str) -> None:
        """A whole program out: every slot retained for `session` becomes free (it keeps its
        tokens: a later request may still reuse them, until the slot is taken)."""
        slots = [s for s, h in self._held.items() if h.session == session]
        longest = _NOTHING
        for slot in slots:
            held = self._held.pop(slot)
            self.stats.evicted_tokens += len(held.tokens)
            longest = held.tokens if len(held.tokens) > len(longest) else longest
            self._free[slot] = held.tokens
        self._lost[session] = longest
        self.stats.evicted_programs += 1

    def _count(self, session: str | None, wanted: np.ndarray, cached: int) -> None:
        self.stats.prompt_tokens += len(wanted)
        self.stats.cached_tokens += cached
        lost = self._lost.pop(session, None) if session is not None else None
        if lost is not None:
            had = min(_common_prefix(lost, wanted), max(len(wanted) - 1, 0))
            self.stats.reprefilled_tokens += max(had - cached, 0)

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

    def write_experts(self, layer: int, slots: torch.Tensor, positions: torch.Tensor, ids: torch.Tensor) -> None:
        """Token i of the batch (in `slots[i]` at `positions[i]`) went to experts `ids[i]` at `layer`."""
        if self.experts is not None:
            self.experts[slots, positions, layer] = ids.to(torch.int16)

    def read_experts(self, slot: int, start: int, end: int) -> np.ndarray:
        """The routed experts of `slot`'s tokens at positions start..end-1: [end - start, layers, top_k] int32."""
        if self.experts is None:
            raise ValueError("this cache keeps no routed experts: the model is dense")
        return self.experts[slot, start:end].to(torch.int32).numpy()


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    if n == 0 or a[0] != b[0]:
        return 0
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n
