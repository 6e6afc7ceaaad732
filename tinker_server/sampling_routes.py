"""The sampling routes: save_weights_for_sampler, sampling sessions and asample.

A save exports the weights on the training thread (after the training requests before it): a LoRA
model's adapter alone, a full-weight model's Hugging Face folder. Samples run on the engine as
they come, several at once, and each is recorded in the store before its future answers.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, HTTPException

from . import codec, wire
from .adapter_slots import AdapterRef
from .backend import ADAPTER_DIR
from .futures import Outcome
from .routes_common import ServerState, caller, known
from .sampling import SampleCall, SamplingSession, SavedSampler, Weights
from .sessions import TrainingModel, UnknownName


def sampling_router(state: ServerState) -> APIRouter:
    router = APIRouter()

    @router.post("/api/v1/save_weights_for_sampler")
    async def save_weights_for_sampler(
        body: wire.SaveWeightsForSamplerRequest, tenant: str = Depends(caller)
    ) -> dict[str, Any]:
        model = known(state, lambda: state.registry.model(body.model_id, tenant))
        if body.kind != "snapshot":
            raise HTTPException(400, "kind='inflight' is not served yet; use the default kind='snapshot'")
        if body.path is None and body.sampling_session_seq_id is None:
            raise HTTPException(
                400, "save_weights_for_sampler needs a path (a named save) or a sampling_session_seq_id"
            )
        path = None if body.path is None else f"tinker://{model.model_id}/sampler_weights/{body.path}"
        folder = state.weights_root / f"save-{len(state.samplers.sessions)}-{secrets.token_hex(4)}"

        async def work() -> Outcome:
            await state.run_training(model.backend.export, folder)
            weights = snapshot_weights(state, model, folder, path)
            session = state.samplers.add(weights, model.session_id, tenant, path)
            if path is None:
                return Outcome(
                    json={"type": "save_weights_for_sampler", "sampling_session_id": session.sampling_session_id}
                )
            state.samplers.saved[path] = SavedSampler(tenant, weights, folder)
            state.registry.deleted.pop(path, None)  # saved again under a deleted name
            return Outcome(json={"type": "save_weights_for_sampler", "path": path})

        request_id = state.futures.submit(work, tenant=tenant, lane=model.session_id, label="save_weights_for_sampler")
        return {"request_id": request_id, "model_id": model.model_id}

    @router.post("/api/v1/create_sampling_session")
    async def create_sampling_session(
        body: wire.CreateSamplingSessionRequest, tenant: str = Depends(caller)
    ) -> dict[str, Any]:
        known(state, lambda: state.registry.open_session(body.session_id, tenant))
        if body.model_path is not None:
            saved = known(state, lambda: _saved_sampler(state, body.model_path, tenant))
            session = state.samplers.add(saved.weights, body.session_id, tenant, body.model_path)
        elif body.base_model in state.base_models:
            base = Weights(body.base_model, state.base_models[body.base_model])
            session = state.samplers.add(base, body.session_id, tenant)
        else:
            raise HTTPException(
                400,
                f"unknown base_model {body.base_model!r}; this server samples {sorted(state.base_models)} or a saved model_path",
            )
        return {"type": "create_sampling_session", "sampling_session_id": session.sampling_session_id}

    @router.get("/api/v1/samplers/{sampler_id:path}")
    async def get_sampler(sampler_id: str, tenant: str = Depends(caller)) -> dict[str, Any]:
        session = known(state, lambda: _sampling_session(state, sampler_id, tenant))
        return {"sampler_id": sampler_id, "base_model": session.base_model, "model_path": session.model_path}

    @router.post("/api/v1/asample")
    async def asample(body: wire.SampleRequest, tenant: str = Depends(caller)) -> dict[str, Any]:
        if body.sampling_session_id is None:
            raise HTTPException(400, "asample needs a sampling_session_id; create a SamplingClient first")
        session = known(state, lambda: _sampling_session(state, body.sampling_session_id, tenant))
        if unserved := body.unserved():
            raise HTTPException(400, f"{', '.join(unserved)} not served yet (docs/tinker.md); leave them unset")
        call = _sample_call(body, state.context_lengths[session.base_model])

        request_id = ""  # set by submit below, before its task first runs

        async def work() -> Outcome:
            sequences, prompt = await state.samplers.sample(session, call)
            decode = state.samplers.decoder(session)
            scores = None if prompt is None else prompt.logprobs
            await state.recorder.record(session, call, sequences, scores, decode, request_id)
            return Outcome(proto=codec.encode_sample_response(sequences, prompt))

        request_id = state.futures.submit(work, tenant=tenant)
        return {"request_id": request_id, "sample_sequence_ids": [f"{request_id}:{i}" for i in range(body.num_samples)]}

    return router


def snapshot_weights(state: ServerState, model: TrainingModel, folder: Path, path: str | None) -> Weights:
    """What a sampler save of `model` samples: its adapter on the base model's engine (named by
    its path, else by model and folder: unique either way), or, full weight, the folder itself."""
    version = str(model.backend.steps)
    if model.backend.lora is None:
        return Weights(model.base_model, folder, model_id=model.model_id, weight_version=version, snapshot=folder)
    adapter = AdapterRef(path or f"{model.model_id}/{folder.name}", folder / ADAPTER_DIR)
    base = state.base_models[model.base_model]
    return Weights(model.base_model, base, adapter, model.model_id, version, snapshot=folder)


def _saved_sampler(state: ServerState, path: str, tenant: str) -> SavedSampler:
    """The tenant's named sampler save at `path` (`UnknownName` if none, or deleted)."""
    saved = state.samplers.saved.get(path)
    if saved is None or saved.tenant != tenant:
        state.registry.check_not_deleted(path, tenant)
        raise UnknownName(f"no saved sampler weights at {path!r}; save_weights_for_sampler(name) returns the path")
    return saved


def _sampling_session(state: ServerState, sampling_session_id: str, tenant: str) -> SamplingSession:
    """The tenant's sampling session, refused once the checkpoint it samples was deleted."""
    session = state.samplers.session(sampling_session_id, tenant)
    if session.weights.deleted:  # only a checkpoint delete removes a snapshot's folder
        raise UnknownName(
            f"the sampler weights at {session.model_path!r} that sampling session {sampling_session_id!r} samples "
            "were deleted (delete_checkpoint); save new ones and create a sampling client on them"
        )
    return session


def _sample_call(body: wire.SampleRequest, context_length: int) -> SampleCall:
    params = body.sampling_params
    stop = [params.stop] if isinstance(params.stop, str) else params.stop
    tokens = [t for chunk in body.prompt.chunks for t in chunk.tokens]
    if not tokens:
        raise HTTPException(400, "the prompt has no tokens; send at least one")
    if params.top_k == 0 or params.top_k < -1:
        raise HTTPException(400, f"top_k must be -1 (off) or >= 1, got {params.top_k}")
    return SampleCall(
        prompt=tokens,
        num_samples=body.num_samples,
        max_tokens=params.max_tokens or context_length - len(tokens),
        temperature=params.temperature,
        top_k=params.top_k,
        top_p=params.top_p,
        seed=params.seed,
        stop_strings=[s for s in stop or [] if isinstance(s, str)],
        stop_token_ids=None if stop is None else [s for s in stop if isinstance(s, int)],
        prompt_logprobs=bool(body.prompt_logprobs),
        topk_prompt_logprobs=body.topk_prompt_logprobs,
    )
