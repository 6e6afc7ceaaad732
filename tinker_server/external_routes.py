"""The external weights routes: `save_weights_external`, `get_external_weights_urls` and the
signed file downloads those URLs point at (`external_weights.py`)."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import FileResponse

from . import checkpoints, wire
from .external_weights import FILES_PREFIX, split_file_path
from .futures import Outcome
from .routes_common import ServerState, caller, known
from .sessions import SavedState, UnknownName


def external_router(state: ServerState) -> APIRouter:
    router = APIRouter()

    @router.post("/api/v1/save_weights_external")
    async def save_weights_external(
        body: wire.SaveWeightsExternalRequest, tenant: str = Depends(caller)
    ) -> dict[str, Any]:
        model = known(state, lambda: state.registry.model(body.model_id, tenant))
        if body.age_encryption_recipients:
            raise HTTPException(400, "age_encryption_recipients is not served; export unencrypted (leave it unset)")
        path = f"tinker://{model.model_id}/external_weights/{body.path}"
        if not body.path or "/" in body.path or path in state.registry.external:
            raise HTTPException(400, f"{path!r} is taken or not a name; pick a new name without '/'")
        folder = state.weights_root / f"external-{secrets.token_hex(6)}"

        async def work() -> Outcome:
            await state.run_training(model.backend.export_external, folder)
            trained = model.lora if model.backend.lora is not None else None
            state.registry.external[path] = SavedState(path, tenant, model.base_model, trained, folder)
            state.registry.deleted.pop(path, None)
            return Outcome(json={"type": "save_weights_external", "path": path})

        request_id = state.futures.submit(work, tenant=tenant, lane=model.session_id, label="save_weights_external")
        return {"request_id": request_id, "model_id": model.model_id}

    @router.get("/api/v1/training_runs/{training_run_id}/checkpoints/{checkpoint_id:path}/external_weights_urls")
    async def external_weights_urls(
        training_run_id: str, checkpoint_id: str, request: Request, tenant: str = Depends(caller)
    ) -> wire.ExternalWeightsUrls:
        path = f"tinker://{training_run_id}/{checkpoint_id}"
        saved = known(state, lambda: _export(state, path, tenant))
        urls, expires = state.signer.urls(str(request.base_url), path, saved.folder)
        return wire.ExternalWeightsUrls(urls=urls, expires=datetime.fromtimestamp(expires, UTC))

    @router.put("/api/v1/training_runs/{training_run_id}/checkpoints/{checkpoint_id:path}/ttl")
    async def set_ttl(
        training_run_id: str, checkpoint_id: str, body: wire.TtlRequest, tenant: str = Depends(caller)
    ) -> None:
        # Accepted and not kept: nothing on this server expires (docs/tinker.md).
        path = f"tinker://{training_run_id}/{checkpoint_id}"
        if not any(c.path == path for c in checkpoints.of_tenant(state.registry, state.samplers, tenant)):
            known(state, lambda: state.registry.check_not_deleted(path, tenant))
            raise HTTPException(404, f"no checkpoint at {path!r}; list_checkpoints(run_id) lists a run's checkpoints")

    @router.get(FILES_PREFIX + "{signature}/{expires}/{tail:path}")
    async def external_file(signature: str, expires: int, tail: str) -> FileResponse:
        try:
            path, relative = split_file_path(tail)
        except ValueError as exc:
            raise HTTPException(404, str(exc)) from None
        if refused := state.signer.check(signature, expires, path, relative):
            raise HTTPException(403, refused)
        saved = state.registry.external.get(path)
        file = None if saved is None else saved.folder / relative
        if file is None or not file.is_file():
            raise HTTPException(404, f"{path!r} has no file {relative!r} any more (deleted)")
        return FileResponse(file)

    return router


def _export(state: ServerState, path: str, tenant: str) -> SavedState:
    saved = state.registry.external.get(path)
    if saved is None or saved.tenant != tenant:
        state.registry.check_not_deleted(path, tenant)
        raise UnknownName(f"no external weights at {path!r}; save_weights_external(name) returns the path of one")
    return saved
