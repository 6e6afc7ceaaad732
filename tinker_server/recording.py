"""Tinker samples in roost's trajectory store: a store session per sampling session, a call per
sampled sequence.

A sampling session is one SamplingClient's weights (one snapshot, or the base), so its calls
share an adapter and a weight version, and the viewer shows each client's samples together; its
group is the training model (`base:<name>` for a base-model client), so a model's clients sit
side by side. The session is written with its first call (a client that never samples leaves
nothing) and stays open: Tinker has no end to a sampling session. A sample's calls are committed
before its future answers, as the gateway commits a call before it answers.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from roost.rollout.store.records import CallRecord, SessionRecord, ids_array, logprob_array
from roost.rollout.store.trajectory_store import TrajectoryStore

from .sampling import SampleCall, SamplingSession, Sequence

ENDPOINT = "asample"
BACKEND = "embedded"


def check_store(path: Path) -> None:
    """Open (creating it if need be) and close the store at `path`; ValueError saying what to pass
    instead when it cannot hold trajectories (not SQLite, a newer schema, a folder one cannot write)."""
    store = TrajectoryStore(path)
    try:
        store.open()
    except (sqlite3.Error, RuntimeError, OSError) as exc:
        raise ValueError(
            f"--store {path} cannot hold trajectories ({exc}); pass a new file, or a store roost wrote"
        ) from None
    store.close()


class SampleRecorder:
    """Writes each `asample` of this server into its store."""

    def __init__(self, store: TrajectoryStore) -> None:
        self.store = store
        self._seqs: dict[str, int] = {}
        """Sampling session id → the seq its next call takes (present once its session is written)."""

    async def record(
        self,
        session: SamplingSession,
        call: SampleCall,
        sequences: list[Sequence],
        prompt_logprobs: np.ndarray | None,
        decode: Callable[[list[int]], str],
        request_id: str,
    ) -> None:
        sid = session.sampling_session_id
        if sid not in self._seqs:
            self._seqs[sid] = 0  # taken before the await: concurrent samples write the session once
            await self.store.create_session(session_record(session))
        prompt_text = decode(call.prompt)
        for index, sequence in enumerate(sequences):
            seq, self._seqs[sid] = self._seqs[sid], self._seqs[sid] + 1
            request = {
                "prompt": prompt_text,
                "num_samples": call.num_samples,
                "sample": index,
                "request_id": request_id,
            }
            response = {"text": decode(sequence.tokens), "stop_reason": sequence.stop_reason}
            if prompt_logprobs is not None and index == 0:
                response["prompt_logprobs"] = [None if np.isnan(v) else float(v) for v in prompt_logprobs]
            await self.store.record_call(call_record(session, call, index, seq, sequence, request, response))


def session_record(session: SamplingSession) -> SessionRecord:
    weights = session.weights
    return SessionRecord(
        session_id=session.sampling_session_id,
        key_hash="",  # not a gateway session: no key opens it
        group_id=weights.model_id or f"base:{weights.base_model}",
        task={"base_model": weights.base_model, "model_id": weights.model_id, "model_path": session.model_path},
        metadata={"source": "tinker", "adapter": adapter_name(session), "weight_version": weights.weight_version},
        created_at=time.time(),
    )


def call_record(
    session: SamplingSession,
    call: SampleCall,
    index: int,
    seq: int,
    sequence: Sequence,
    request: dict[str, Any],
    response: dict[str, Any],
) -> CallRecord:
    return CallRecord(
        call_id=uuid.uuid4().hex,
        session_id=session.sampling_session_id,
        agent_id="main",
        parent_agent=None,
        seq=seq,
        endpoint=ENDPOINT,
        backend=BACKEND,
        model=session.base_model,
        parent_call_id=None,
        shared_prefix_len=0,
        kind="root",
        reuse="none",
        prompt_ids=ids_array(call.prompt),
        sampled_ids=ids_array(sequence.tokens),
        sampled_logprobs=logprob_array(sequence.logprobs),
        finish_reason=sequence.finish_reason or {"type": sequence.stop_reason},
        sampling_params=sampling_params(call, index),
        weight_version=session.weights.weight_version,
        timings={},
        request=request,
        response=response,
        created_at=time.time(),
        adapter=adapter_name(session),
    )


def sampling_params(call: SampleCall, index: int) -> dict[str, Any]:
    """The params sample `index` ran with (its seed is the request's plus its index)."""
    return {
        "max_tokens": call.max_tokens,
        "temperature": call.temperature,
        "top_k": call.top_k,
        "top_p": call.top_p,
        "seed": None if call.seed is None else call.seed + index,
        "stop_strings": call.stop_strings,
        "stop_token_ids": call.stop_token_ids,
        "prompt_logprobs": call.prompt_logprobs,
    }


def adapter_name(session: SamplingSession) -> str:
    adapter = session.weights.adapter
    return "" if adapter is None else adapter.name
