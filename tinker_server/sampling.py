"""Sampling sessions, and the engines that sample them: one per base model, its LoRA snapshots
loaded into it as adapters.

A session made by `save_weights_for_sampler` samples from the training model's weights as they
were then (a snapshot); one made with `base_model` from the base. A LoRA snapshot is its adapter
alone (PEFT's layout), sampled by name on its base model's engine, so the samples of every tenant
of one base model batch together in one engine; a full-weight snapshot is a Hugging Face folder
sampled by an engine of its own. Engines are built on first use and kept for the server's life.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from roost.rollout.engine.prompt_scores import prompt_logprobs

from .adapter_slots import AdapterRef, AdapterSlots
from .futures import RequestFailure
from .sessions import UnknownName


@dataclass(frozen=True)
class Weights:
    """What a sampling session samples: the engine's folder, and the LoRA snapshot on it if any."""

    base_model: str
    folder: Path
    """The engine's weights: the base model's folder (base or LoRA), a full-weight snapshot's own."""
    adapter: AdapterRef | None = None
    model_id: str | None = None
    """The training model the snapshot was taken of; None: the base model."""
    weight_version: str = "0"
    """The training model's optim_step count at the snapshot ("0": the base weights)."""
    snapshot: Path | None = None
    """The snapshot's own folder (the adapter's parent, or the full-weight folder); None: the base.
    A checkpoint delete removes it, and with it every session sampling these weights."""

    @property
    def deleted(self) -> bool:
        return self.snapshot is not None and not self.snapshot.is_dir()


@dataclass
class SavedSampler:
    """A named sampler save: whose it is and what it samples (`folder`: what a delete removes)."""

    tenant: str
    weights: Weights
    folder: Path
    created: float = field(default_factory=time.time)


@dataclass
class SamplingSession:
    sampling_session_id: str
    tenant: str
    """The tenant (API key) whose session made it; only it may sample here."""
    weights: Weights
    model_path: str | None = None

    @property
    def base_model(self) -> str:
        return self.weights.base_model


@dataclass
class SampleCall:
    """One `asample` request, as the engine needs it."""

    prompt: list[int]
    num_samples: int
    max_tokens: int
    temperature: float
    top_k: int
    top_p: float
    seed: int | None
    stop_strings: list[str]
    stop_token_ids: list[int] | None
    """None: the model's end-of-sequence tokens; []: none at all (Tinker's meaning)."""
    prompt_logprobs: bool
    topk_prompt_logprobs: int = 0
    """k: the k most likely tokens at each prompt position, with their logprobs (0: none)."""


@dataclass
class PromptScores:
    """What a sample asked of its prompt: each token's logprob, and the top-k at each position."""

    logprobs: np.ndarray | None
    topk: tuple[np.ndarray, np.ndarray] | None = None
    """(token ids int32, logprobs float32), each [len(prompt), k]; row 0 (no context) masked."""


@dataclass
class Sequence:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: str
    """`stop` or `length`."""
    finish_reason: dict | None = None
    """The engine's own finish reason (`{"type": "stop", "matched": ...}`), as recorded."""


class Samplers:
    """Sampling sessions, and the engines that serve their weights."""

    def __init__(self, *, max_loaded_adapters: int = 8, max_lora_rank: int = 128) -> None:
        self.sessions: dict[str, SamplingSession] = {}
        self.saved: dict[str, SavedSampler] = {}
        """tinker:// path of a named save → whose it is and the weights it holds."""
        self._engines: dict[Path, object] = {}
        self.slots: dict[Path, AdapterSlots] = {}
        """Engine folder → the LoRA snapshots loaded into that engine."""
        self._building: dict[Path, asyncio.Lock] = {}
        self._ids = itertools.count()
        self._max_loaded_adapters = max_loaded_adapters
        self._max_lora_rank = max_lora_rank

    def add(self, weights: Weights, owner: str, tenant: str, model_path: str | None = None) -> SamplingSession:
        session = SamplingSession(f"{owner}:sample:{next(self._ids)}", tenant, weights, model_path)
        self.sessions[session.sampling_session_id] = session
        return session

    def session(self, sampling_session_id: str, tenant: str) -> SamplingSession:
        session = self.sessions.get(sampling_session_id)
        if session is None or session.tenant != tenant:
            raise UnknownName(
                f"no sampling session {sampling_session_id!r}; create one with save_weights_and_get_sampling_client "
                "or create_sampling_client"
            )
        return session

    async def engine(self, folder: Path):
        """The engine serving `folder`'s weights, built (off the event loop) on first use."""
        lock = self._building.setdefault(folder, asyncio.Lock())
        async with lock:
            if folder not in self._engines:
                engine = await asyncio.to_thread(self._build, folder)
                engine.start()
                self._engines[folder] = engine
                self.slots[folder] = AdapterSlots(engine, self._max_loaded_adapters)
        return self._engines[folder]

    def _build(self, folder: Path):
        from roost.rollout.engine.adapters import AdapterLimits
        from roost.rollout.engine.engine import Engine, EngineConfig

        limits = AdapterLimits(max_loras=self._max_loaded_adapters, max_lora_rank=self._max_lora_rank)
        return Engine(EngineConfig(folder, max_running=16, lora=limits))

    async def sample(self, session: SamplingSession, call: SampleCall) -> tuple[list[Sequence], PromptScores | None]:
        weights = session.weights
        engine = await self.engine(weights.folder)
        from roost.rollout.engine_api.wire import RequestError

        try:
            adapter = None if weights.adapter is None else await self.slots[weights.folder].hold(weights.adapter)
            engine.check_prompt(call.prompt)
            params = [_params(call, i) for i in range(call.num_samples)]
            plans = [engine.plan(call.prompt, p, adapter=adapter) for p in params]
            completions = await asyncio.gather(
                *(engine.generate(call.prompt, p, plan=plan) for p, plan in zip(params, plans))
            )
        except RequestError as exc:
            raise RequestFailure(str(exc)) from None
        sequences = [
            Sequence(c.output_ids, c.logprobs, _stop_reason(c.finish_reason), c.finish_reason) for c in completions
        ]
        if not (call.prompt_logprobs or call.topk_prompt_logprobs):
            return sequences, None
        logprobs, topk = await asyncio.to_thread(
            prompt_logprobs, engine, call.prompt, adapter, call.topk_prompt_logprobs
        )
        return sequences, PromptScores(logprobs if call.prompt_logprobs else None, topk)

    async def forget(self, weights: Weights) -> None:
        """Free what sampled `weights`, whose files are being deleted: its adapter in the base
        model's engine, or (full weight) the engine of its own."""
        if weights.adapter is not None:
            if (slots := self.slots.get(weights.folder)) is not None:
                await slots.drop(weights.adapter)
            return
        self.slots.pop(weights.folder, None)
        engine = self._engines.pop(weights.folder, None)
        if engine is not None:
            await asyncio.to_thread(engine.stop)

    def decoder(self, session: SamplingSession):
        """The tokenizer's `decode` of the engine that sampled `session` (built by `sample`)."""
        return self._engines[session.weights.folder].decode

    def stop(self) -> None:
        for engine in self._engines.values():
            engine.stop()


def _stop_reason(finish_reason: dict | None) -> str:
    return "length" if (finish_reason or {}).get("type") == "length" else "stop"


def _params(call: SampleCall, index: int):
    from roost.rollout.engine_api.wire import SamplingParams

    return SamplingParams(
        max_new_tokens=call.max_tokens,
        temperature=call.temperature,
        top_k=call.top_k,
        top_p=call.top_p,
        # each of num_samples its own stream, all fixed by the request's seed
        sampling_seed=None if call.seed is None else call.seed + index,
        stop=call.stop_strings or None,
        stop_token_ids=call.stop_token_ids or None,
        ignore_eos=call.stop_token_ids == [],
    )
