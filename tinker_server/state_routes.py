"""The state routes: save_weights (`save_state`) and load_weights (`load_state`,
`load_state_with_optimizer`, `create_training_client_from_state[_with_optimizer]`).

A saved state is kept at `tinker://<model_id>/weights/<name>` while the server runs, or until its
tenant deletes it (`rest_routes.py`); only its tenant sees it. Loading it
builds the model's backend anew from the state (on the training thread, after the requests before
it), with Adam's moments when the SDK asks for the optimizer, else a fresh Adam.
"""

from __future__ import annotations

import secrets
from typing import Any

from fastapi import APIRouter, Depends, HTTPException

from . import wire
from .backend import from_state, lora_spec
from .futures import Outcome
from .routes_common import ServerState, caller, known
from .sessions import SavedState, TrainingModel


def state_router(state: ServerState) -> APIRouter:
    router = APIRouter()

    @router.post("/api/v1/save_weights")
    async def save_weights(body: wire.SaveWeightsRequest, tenant: str = Depends(caller)) -> dict[str, Any]:
        model = known(state, lambda: state.registry.model(body.model_id, tenant))
        if not body.path:
            raise HTTPException(400, "save_state needs a name (save_state('step-10'))")
        path = f"tinker://{model.model_id}/weights/{body.path}"
        if path in state.registry.states and not body.overwrite:
            # 400, not 409: the SDK retries a 409 without end
            raise HTTPException(400, f"a state is saved at {path!r} already; pick another name or pass overwrite=True")
        folder = state.weights_root / f"state-{secrets.token_hex(6)}"

        async def work() -> Outcome:
            await state.run_training(model.backend.save_state, folder)
            trained = model.lora if model.backend.lora is not None else None
            state.registry.states[path] = SavedState(path, tenant, model.base_model, trained, folder)
            state.registry.deleted.pop(path, None)  # saved again under a deleted name
            return Outcome(json={"type": "save_weights", "path": path})

        request_id = state.futures.submit(work, tenant=tenant, lane=model.session_id, label="save_state")
        return {"request_id": request_id, "model_id": model.model_id}

    @router.post("/api/v1/load_weights")
    async def load_weights(body: wire.LoadWeightsRequest, tenant: str = Depends(caller)) -> dict[str, Any]:
        saved = known(state, lambda: state.registry.state(body.path, tenant))
        if body.model_id is not None:
            model = known(state, lambda: state.registry.model(body.model_id, tenant))
            return _load_into(state, model, saved, body.optimizer)
        if body.session_id is None or body.model_seq_id is None:
            raise HTTPException(
                400, "load_weights needs a model_id (load into it) or a session_id and model_seq_id (a new model)"
            )
        return _create_from(state, body, saved, tenant)

    return router


def _load_into(state: ServerState, model: TrainingModel, saved: SavedState, optimizer: bool) -> dict[str, Any]:
    trained = None if saved.lora is None else lora_spec(saved.lora)
    if saved.base_model != model.base_model or trained != model.backend.lora:
        raise HTTPException(
            400,
            f"the state at {saved.path!r} was trained on {saved.base_model!r} with {trained or 'every weight'}; "
            f"model {model.model_id!r} trains {model.base_model!r} with {model.backend.lora or 'every weight'}: "
            "load it with create_training_client_from_state instead",
        )
    base = state.base_models[model.base_model]

    async def work() -> Outcome:
        model.backend = await state.run_training(from_state, base, trained, saved.folder, optimizer)
        return Outcome(json={"type": "load_weights", "path": saved.path, "model_id": model.model_id})

    request_id = state.futures.submit(work, tenant=saved.tenant, lane=model.session_id, label="load_state")
    return {"request_id": request_id, "model_id": model.model_id}


def _create_from(state: ServerState, body: wire.LoadWeightsRequest, saved: SavedState, tenant: str) -> dict[str, Any]:
    known(state, lambda: state.registry.open_session(body.session_id, tenant))
    if body.base_model not in (None, saved.base_model):
        raise HTTPException(
            400, f"the state at {saved.path!r} was trained on {saved.base_model!r}, not {body.base_model!r}"
        )
    model_id = f"{body.session_id}:train:{body.model_seq_id}"
    if not state.registry.reserve(model_id):
        raise HTTPException(409, f"model {model_id!r} exists already; use a new model_seq_id")
    trained = None if saved.lora is None else lora_spec(saved.lora)
    base = state.base_models[saved.base_model]

    async def work() -> Outcome:
        try:
            backend = await state.run_training(from_state, base, trained, saved.folder, body.optimizer)
        finally:
            state.registry.pending.discard(model_id)
        model = TrainingModel(model_id, body.session_id, tenant, saved.base_model, saved.lora, backend)
        state.registry.add_model(model)
        return Outcome(json={"type": "load_weights", "path": saved.path, "model_id": model_id})

    request_id = state.futures.submit(work, tenant=tenant, lane=body.session_id, label="create_from_state")
    return {"request_id": request_id, "model_id": model_id}
