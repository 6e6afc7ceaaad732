"""Continuous batching: the engine's decode loop, on a thread of its own.

Between two decode steps the loop runs pending control work (weight swaps), admits
waiting requests (prefilled together, which also samples their first token) and drops
finished or cancelled ones; each step then decodes one token for every running request
together. The asyncio side never blocks on torch: it submits requests and receives
`StepOutput`s through the callbacks the requests carry.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np
import torch

from roost.rollout.engine.constrained_sampling import GrammarSampler
from roost.rollout.engine.kv_cache import SlotKVCache
from roost.rollout.engine.model import CausalLM
from roost.rollout.engine.prompt_images import ChunkImages, chunk_images
from roost.rollout.engine.request import EngineRequest, StepOutput

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(
        self,
        model: CausalLM,
        cache: SlotKVCache,
        *,
        max_running: int,
        prefill_tokens: int = 8192,
        weight_version: str = "0",
    ):
        self.model = model
        self.cache = cache
        self.max_running = max_running
        self.prefill_tokens = prefill_tokens
        self.weight_version = weight_version
        self._incoming: queue.SimpleQueue[EngineRequest] = queue.SimpleQueue()
        self._waiting: deque[EngineRequest] = deque()
        self._running: list[EngineRequest] = []
        self._control: queue.SimpleQueue[tuple[Callable[[], Any], Future]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._paused = False
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="roost-engine", daemon=True)
        self.steps = 0
        self.prefill_batches = 0
        self._sampler = GrammarSampler()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=10)

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return len(self._waiting) + self._incoming.qsize()

    @property
    def paused(self) -> bool:
        return self._paused

    def submit(self, request: EngineRequest) -> None:
        self._incoming.put(request)
        self._wake.set()

    def call(self, fn: Callable[[], Any]) -> Future:
        """Run `fn` on the engine thread between two steps (even while paused)."""
        future: Future = Future()
        self._control.put((fn, future))
        self._wake.set()
        return future

    def set_paused(self, paused: bool) -> None:
        self._paused = paused
        self._wake.set()

    def abort_all(self) -> int:
        """Finish every running and waiting request with an abort reason (engine thread only)."""
        return self.abort(None)

    def abort(self, rids: set[str] | None) -> int:
        """Finish the running and waiting requests of `rids` (None: all) with an abort reason
        (engine thread only)."""
        self._drain_incoming()
        victims = [r for r in [*self._running, *self._waiting] if rids is None or r.rid in rids]
        for request in victims:
            # token_id -1: no token came with this event.
            self._finish(request, StepOutput(-1, 0.0, {"type": "abort", "message": "aborted"}, self.weight_version))
        self._running = [r for r in self._running if not r.finished]
        self._waiting = deque(r for r in self._waiting if not r.finished)
        return len(victims)

    def _loop(self) -> None:
        torch.set_grad_enabled(False)
        while not self._stopped:
            self._run_control()
            self._drain_incoming()
            self._drop_cancelled()
            if self._paused or not (self._running or self._waiting):
                self._wake.wait(0.05)
                self._wake.clear()
                continue
            try:
                # The model's logits are inference tensors, and a step writes into them (the
                # stop-token mask of `_choose`): outside inference mode that write raises.
                with torch.inference_mode():
                    self._admit()
                    if self._running:
                        self._decode()
            except Exception:  # a bug must not kill the engine thread silently
                log.exception("engine step failed; aborting the running batch")
                self.abort_all()

    def _run_control(self) -> None:
        while True:
            try:
                fn, future = self._control.get_nowait()
            except queue.Empty:
                return
            try:
                future.set_result(fn())
            except Exception as exc:
                future.set_exception(exc)

    def _drain_incoming(self) -> None:
        while True:
            try:
                self._waiting.append(self._incoming.get_nowait())
            except queue.Empty:
                return

    def _drop_cancelled(self) -> None:
        for request in [r for r in self._running if r.cancelled]:
            self._release(request)
        self._running = [r for r in self._running if not r.cancelled]
        self._waiting = deque(r for r in self._waiting if not r.cancelled)

    def _admit(self) -> None:
        """Prefill waiting requests together, as many as there are slots for, until the batch
        holds `prefill_tokens` new tokens (it may pass that by one request's)."""
        batch: list[EngineRequest] = []
        tokens = 0
        while (
            self._waiting
            and tokens < self.prefill_tokens
            and len(self._running) + len(batch) < self.max_running
            and self.cache.free_slots
        ):
            request = self._waiting.popleft()
            request.slot, request.cached_tokens = self.cache.acquire(
                request.cache_key, _cache_owner(request), request.plan.session
            )
            tokens += len(request.prompt_ids) - request.cached_tokens
            batch.append(request)
        if not batch:
            return
        self.prefill_batches += 1
        chunks = [torch.tensor(r.prompt_ids[r.cached_tokens :], dtype=torch.long) for r in batch]
        starts, slots = [r.cached_tokens for r in batch], [r.slot for r in batch]
        images = [self._chunk_images(r) for r in batch]
        logits = self.model.prefill(chunks, starts, slots, self.cache, [r.plan.adapter for r in batch], images)
        self._running.extend(batch)
        self._advance(batch, logits)

    def _chunk_images(self, request: EngineRequest) -> ChunkImages | None:
        """The features and positions of a request's prompt past its reused prefix (None: no images)."""
        images = request.plan.images
        if images is None:
            return None
        return chunk_images(images, request.cached_tokens, len(request.prompt_ids), self.model.visual)

    def _decode(self) -> None:
        batch = self._running
        ids = torch.tensor([r.output_ids[-1] for r in batch], dtype=torch.long)
        positions = torch.tensor([r.position for r in batch], dtype=torch.long)
        slots = torch.tensor([r.slot for r in batch], dtype=torch.long)
        deltas = (
            torch.tensor([r.rope_delta for r in batch], dtype=torch.long) if self.model.visual is not None else None
        )
        adapters = [r.plan.adapter for r in batch]
        logits = self.model.decode_step(ids, positions, slots, self.cache, adapters, deltas)
        self.steps += 1
        self._advance(batch, logits)

    def _advance(self, batch: list[EngineRequest], logits: torch.Tensor) -> None:
        """Pick a token for each request of `batch`, emit it, and retire finished ones."""
        logprobs = torch.log_softmax(logits, dim=-1)
        tokens = self._choose(batch, logits)
        picked = logprobs[torch.arange(len(batch)), torch.tensor(tokens)].tolist()
        for request, token, logprob in zip(batch, tokens, picked):
            request.output_ids.append(token)
            room = self.cache.max_len - (len(request.prompt_ids) + len(request.output_ids))
            reason = request.finish_reason(token, room)
            output = StepOutput(token, logprob, reason, self.weight_version, request.cached_tokens)
            if reason is None:
                request.emit([output])
            else:
                self._finish(request, output)
        self._running = [r for r in self._running if not r.finished]

    def _choose(self, batch: list[EngineRequest], logits: torch.Tensor) -> list[int]:
        """Masks `logits` in place (the logprobs were taken before) and picks a token per row."""
        for row, request in enumerate(batch):
            if request.masks_stop_tokens() and request.plan.stop_token_ids:
                logits[row, list(request.plan.stop_token_ids)] = float("-inf")
        tokens = self._sampler.choose(
            logits, [r.plan.sampling for r in batch], [r.draw() for r in batch], [r.grammar for r in batch]
        )
        return [r.forced_token() if r.plan.forced_ids is not None else t for r, t in zip(batch, tokens)]

    def _finish(self, request: EngineRequest, output: StepOutput) -> None:
        request.finished = True
        start = request.plan.routed_experts_from
        if start is not None and request.slot is not None:  # read before the slot goes back
            experts = self.cache.read_experts(request.slot, start, request.fed_tokens)
            output = dataclasses.replace(output, routed_experts=experts)
        self._release(request)
        request.emit([output])

    def _release(self, request: EngineRequest) -> None:
        if request.slot is not None:
            # the last sampled token was never fed through the model: its K/V are not there
            held = np.concatenate([request.cache_key, np.asarray(request.output_ids[:-1], dtype=np.int64)])
            self.cache.release(request.slot, held, request.plan.session)
            request.slot = None

    def requests(self) -> list[EngineRequest]:
        """The running and waiting requests (engine thread only)."""
        self._drain_incoming()
        return [*self._running, *self._waiting]


def _cache_owner(request: EngineRequest) -> int:
    # Keys and values depend on the adapter: a prefix is reused only by the same load of it (0: none).
    return 0 if request.plan.adapter is None else request.plan.adapter.uid
