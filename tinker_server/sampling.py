"""Sampling sessions: each samples from one set of weights with roost's embedded engine.

A session made by `save_weights_for_sampler` samples from the training model's weights as they
were then (a snapshot, exported as a Hugging Face folder); one made with `base_model` from the
base. Engines are built per weights folder and kept for the server's life.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .futures import RequestFailure
from .sessions import UnknownName


@dataclass
class SamplingSession:
    sampling_session_id: str
    tenant: str
    """The tenant (API key) whose session made it; only it may sample here."""
    base_model: str
    folder: Path
    model_path: str | None = None
    created: float = field(default_factory=time.time)


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


class Samplers:
    """Sampling sessions, and the engines that serve their weights."""

    def __init__(self) -> None:
        self.sessions: dict[str, SamplingSession] = {}
        self.saved: dict[str, SamplingSession] = {}
        """tinker:// path of a named save → the session that holds its weights."""
        self._engines: dict[Path, object] = {}
        self._building: dict[Path, asyncio.Lock] = {}
        self._ids = itertools.count()

    def add(
        self, base_model: str, folder: Path, owner: str, tenant: str, model_path: str | None = None
    ) -> SamplingSession:
        session = SamplingSession(f"{owner}:sample:{next(self._ids)}", tenant, base_model, folder, model_path)
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
                from roost.rollout.engine.engine import Engine, EngineConfig

                engine = await asyncio.to_thread(Engine, EngineConfig(folder, max_running=16))
                engine.start()
                self._engines[folder] = engine
        return self._engines[folder]

    async def sample(self, session: SamplingSession, call: SampleCall) -> tuple[list[Sequence], PromptScores | None]:
        engine = await self.engine(session.folder)
        from roost.rollout.engine_api.wire import RequestError

        try:
            completions = await asyncio.gather(
                *(engine.generate(call.prompt, _params(call, i)) for i in range(call.num_samples))
            )
        except RequestError as exc:
            raise RequestFailure(str(exc)) from None
        sequences = [
            Sequence(c.output_ids, c.logprobs, "length" if (c.finish_reason or {}).get("type") == "length" else "stop")
            for c in completions
        ]
        if not (call.prompt_logprobs or call.topk_prompt_logprobs):
            return sequences, None
        logprobs, topk = await asyncio.to_thread(prompt_logprobs, engine, call.prompt, call.topk_prompt_logprobs)
        return sequences, PromptScores(logprobs if call.prompt_logprobs else None, topk)

    async def forget(self, folder: Path) -> None:
        """Stop and drop the engine serving `folder`, whose weights are being deleted."""
        engine = self._engines.pop(folder, None)
        if engine is not None:
            await asyncio.to_thread(engine.stop)

    def stop(self) -> None:
        for engine in self._engines.values():
            engine.stop()


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


@torch.inference_mode()
def prompt_logprobs(
    engine, tokens: list[int], topk: int = 0
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
    """log p(tokens[i] | tokens[:i]) for every prompt position (NaN at 0, which has no context),
    and with `topk` > 0 the `topk_logprobs` of each position, from the engine's own model: the
    prefill of `CausalLM.prefill`, keeping every position's logits instead of the last one's, on a
    cache of its own."""
    from roost.rollout.engine.kv_cache import SlotKVCache

    model, spec = engine.model, engine.spec
    cache = SlotKVCache(
        layers=spec.num_layers,
        slots=1,
        kv_heads=spec.num_kv_heads,
        max_len=len(tokens),
        head_dim=spec.head_dim,
        dtype=engine.dtype,
        reuse_prefixes=False,
    )
    ids = torch.tensor(tokens, dtype=torch.long)
    x = model.model.embed_tokens(ids)[None]
    cos, sin = model.rotary(torch.arange(len(tokens))[None], x.dtype)
    for layer in model.model.layers:
        x = layer.finish(x, layer.self_attn.prefill(layer.input_layernorm(x), cos, sin, cache, [(0, 0, len(tokens))]))
    every = torch.log_softmax(model.logits(x[0, :-1]), dim=-1)
    logprobs = every.gather(1, ids[1:, None])[:, 0]
    return np.concatenate([[math.nan], logprobs.numpy()]).astype(np.float32), topk_logprobs(
        every, topk
    ) if topk else None


MASK_LOGPROB = -99999.0
"""The SDK's filler for a top-k entry with no token (`tinker.types.topk_logprobs.MASK_LOGPROB`)."""


def topk_logprobs(every: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k most likely tokens and their logprobs at each prompt position, most likely first,
    from the log-softmax of positions 1.. (`every`, [n - 1, vocab]): [n, k] ids and logprobs,
    row 0 (no context) and the columns past the vocabulary filled with (0, MASK_LOGPROB)."""
    n, k_real = every.shape[0] + 1, min(k, every.shape[1])
    ids, logprobs = np.zeros((n, k), np.int32), np.full((n, k), MASK_LOGPROB, np.float32)
    values, indices = torch.topk(every, k_real, dim=-1)
    ids[1:, :k_real], logprobs[1:, :k_real] = indices.numpy(), values.float().numpy()
    return ids, logprobs
