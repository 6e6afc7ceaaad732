"""Weight updates sent over HTTP, staged until their commit (`roost.rollout.engine_api.weight_upload`
has the wire and the routes).

One update is open at a time: a new `begin` drops an open one (its sender died or gave up), and
chunks naming the dropped id are refused. Every chunk is checked against the update's declared
tensors before anything of it is kept, and nothing reaches the model before the commit, which
checks that every declared tensor came. Base weights travel under their checkpoint names (a
Qwen3-VL's `model.language_model.*` and `model.visual.*`), mapped to the engine's as a load maps them.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from roost.rollout.engine.vision_tower import engine_names
from roost.rollout.engine.weights import Meta, WeightMismatch, all_finite, check_manifest, meta_of
from roost.rollout.engine_api.weight_upload import (
    DTYPES,
    AdapterUpload,
    BeginAnswer,
    BeginUpload,
    ChunkAnswer,
    CommitAnswer,
    decode_chunk,
)
from roost.rollout.engine_api.wire import RequestError
from roost.rollout.lora import Adapter, AdapterError, adapter_from_config

if TYPE_CHECKING:
    from roost.rollout.engine.engine import Engine


@dataclass
class StagedUpdate:
    """An update between its begin and its commit."""

    update_id: str
    declared: dict[str, Meta]
    weight_version: str | None
    adapter: AdapterUpload | None
    received: dict[str, torch.Tensor] = field(default_factory=dict)

    def missing(self) -> list[str]:
        return sorted(set(self.declared) - set(self.received))


def declared_meta(begin: BeginUpload) -> dict[str, Meta]:
    return {name: (tuple(meta.shape), DTYPES[meta.dtype]) for name, meta in begin.tensors.items()}


def chunk_problems(update: StagedUpdate, tensors: dict[str, torch.Tensor]) -> list[str]:
    """Why `tensors` cannot join `update`: names it did not declare or already has, another shape or
    dtype than declared, NaN or inf."""
    problems = []
    for name, tensor in tensors.items():
        want = update.declared.get(name)
        if want is None:
            problems.append(f"{name} was not declared at begin (declared: {len(update.declared)} tensors)")
        elif name in update.received:
            problems.append(f"{name} was already sent in an earlier chunk")
        elif (tuple(tensor.shape), tensor.dtype) != want:
            problems.append(f"{name}: shape {tuple(tensor.shape)} {tensor.dtype}, declared {want[0]} {want[1]}")
        elif not all_finite(tensor):
            problems.append(f"{name}: contains NaN or inf")
    return problems


@dataclass
class Uploads:
    """The engine's open update, if any."""

    open: StagedUpdate | None = None
    dropped: deque[str] = field(default_factory=lambda: deque(maxlen=64))
    """The latest updates closed, to tell a late chunk why its update is gone."""

    def begin(self, begin: BeginUpload) -> tuple[StagedUpdate, str | None]:
        """Open a new update, dropping the open one (its id returned)."""
        superseded = self.open.update_id if self.open is not None else None
        if superseded:
            self.dropped.append(superseded)
        self.open = StagedUpdate(uuid.uuid4().hex, declared_meta(begin), begin.weight_version, begin.adapter)
        return self.open, superseded

    def get(self, update_id: str) -> StagedUpdate:
        if self.open is not None and self.open.update_id == update_id:
            return self.open
        if update_id in self.dropped:
            raise RequestError(
                f"weight update {update_id} was dropped (aborted, committed, or superseded by a newer begin); "
                "start again with POST /roost/weights/begin",
                409,
            )
        raise RequestError(f"no weight update {update_id}; start one with POST /roost/weights/begin", 404)

    def add(self, update_id: str, tensors: dict[str, torch.Tensor]) -> StagedUpdate:
        """Stage one chunk whole, or raise RequestError 400 listing its problems (nothing of it kept)."""
        update = self.get(update_id)
        if not tensors:
            raise RequestError("the chunk holds no tensor; send safetensors bytes of at least one declared tensor")
        problems = chunk_problems(update, tensors)
        if problems:
            shown = "; ".join(problems[:10]) + (f"; and {len(problems) - 10} more" if len(problems) > 10 else "")
            raise RequestError(f"chunk refused, nothing of it kept (update {update_id} stays open): {shown}")
        update.received.update(tensors)
        return update

    def ready(self, update_id: str) -> StagedUpdate:
        """The update, whole; RequestError 400 naming what has not come (the update stays open)."""
        update = self.get(update_id)
        missing = update.missing()
        if missing:
            shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
            raise RequestError(
                f"cannot commit update {update_id}: {len(missing)} declared tensor(s) not sent: {shown}; "
                "send them in chunks, or abort"
            )
        return update

    def close(self, update_id: str) -> StagedUpdate:
        """Take the update out (after its commit, or to abort it)."""
        update = self.get(update_id)
        self.open = None
        self.dropped.append(update_id)
        return update


class WeightReceiver:
    """The engine's side of `/roost/weights/*`: checks each step, stages the tensors, and at the
    commit swaps them into `engine` (base weights) or serves them as an adapter."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.uploads = Uploads()
        self._lock = asyncio.Lock()  # one chunk or commit at a time: they change the staged update

    async def begin(self, begin: BeginUpload) -> BeginAnswer:
        """Check what the update declares against the model (or the adapter config), then open it."""
        if begin.adapter is None:
            expected = meta_of(dict(self.engine.model.state_dict()))
            tied = self.engine.spec.tie_word_embeddings
            try:
                check_manifest(expected, engine_names(declared_meta(begin)), tied_embeddings=tied)
            except WeightMismatch as exc:
                raise RequestError(f"{exc}; declare every tensor of the model, as the engine holds it") from exc
        else:
            _adapter(begin.adapter, {}, "the update's adapter config")
        async with self._lock:
            update, superseded = self.uploads.begin(begin)
        return BeginAnswer(update_id=update.update_id, expected=len(update.declared), superseded=superseded)

    async def chunk(self, update_id: str, body: bytes) -> ChunkAnswer:
        try:
            tensors = await asyncio.to_thread(decode_chunk, body)
        except ValueError as exc:
            raise RequestError(str(exc)) from exc
        async with self._lock:
            update = await asyncio.to_thread(self.uploads.add, update_id, tensors)
        return ChunkAnswer(received=len(update.received), remaining=len(update.missing()))

    async def commit(self, update_id: str) -> CommitAnswer:
        async with self._lock:
            update = self.uploads.ready(update_id)
            self.uploads.close(update_id)  # a commit that fails below drops it too: its contents are wrong
            if update.adapter is None:
                version = await self._commit_base(update)
            else:
                version = await self._commit_adapter(update, update.adapter)
        return CommitAnswer(success=True, message=f"update {update_id} committed", weight_version=version)

    async def abort(self, update_id: str) -> None:
        async with self._lock:
            self.uploads.close(update_id)

    async def _commit_base(self, update: StagedUpdate) -> str:
        try:
            return await self.engine.swap_weights(update.received, update.weight_version)
        except WeightMismatch as exc:
            raise RequestError(f"{exc}; update {update.update_id} dropped, the old weights stay") from exc

    async def _commit_adapter(self, update: StagedUpdate, spec: AdapterUpload) -> str:
        source = f"weight update {update.update_id}"
        adapter = _adapter(spec, update.received, source)
        loaded = await asyncio.to_thread(self.engine.adapters.fit, spec.lora_name, source, adapter)
        return await self.engine.swap_adapter(loaded, replace=spec.load_inplace, weight_version=update.weight_version)


def _adapter(spec: AdapterUpload, tensors: dict[str, torch.Tensor], where: str) -> Adapter:
    try:
        return adapter_from_config(spec.config, tensors, where)
    except (AdapterError, ValueError, TypeError) as exc:
        raise RequestError(f"LoRA adapter {spec.lora_name!r}: {exc}") from exc
