"""The REST client's routes (`service.create_rest_client()`): training runs, checkpoints and
weights info, each answering only about the caller's tenant's.

A training run is a model a session created (its id is the model_id), kept after its session
closed; `access_scope` "owned" and "accessible" mean the same here, since nothing is shared
between tenants. Publishing is refused with a 400: a checkpoint stays its tenant's.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Response

from . import checkpoints, wire
from .routes_common import ServerState, caller, known
from .sessions import TrainingRun

Scope = Literal["owned", "accessible"]


def rest_router(state: ServerState) -> APIRouter:
    router = APIRouter()

    @router.get("/api/v1/training_runs")
    async def list_training_runs(
        limit: int = Query(20, ge=1),
        offset: int = Query(0, ge=0),
        access_scope: Scope = "owned",
        project_id: str | None = None,
        tenant: str = Depends(caller),
    ) -> wire.TrainingRuns:
        runs = [r for r in state.registry.runs.values() if r.tenant == tenant]
        page = [await _described_run(state, r) for r in runs[offset : offset + limit]]
        return wire.TrainingRuns(
            training_runs=page, cursor=wire.Cursor(offset=offset, limit=limit, total_count=len(runs))
        )

    @router.get("/api/v1/training_runs/{training_run_id}")
    async def get_training_run(
        training_run_id: str, access_scope: Scope = "owned", tenant: str = Depends(caller)
    ) -> wire.TrainingRun:
        return await _described_run(state, known(state, lambda: state.registry.run(training_run_id, tenant)))

    @router.get("/api/v1/training_runs/{training_run_id}/checkpoints")
    async def list_checkpoints(training_run_id: str, tenant: str = Depends(caller)) -> wire.CheckpointsList:
        known(state, lambda: state.registry.run(training_run_id, tenant))
        found = checkpoints.of_run(state.registry, state.samplers, tenant, training_run_id)
        return wire.CheckpointsList(checkpoints=[await checkpoints.described(c) for c in found])

    @router.get("/api/v1/checkpoints")
    async def list_user_checkpoints(
        limit: int = Query(100, ge=1), offset: int = Query(0, ge=0), tenant: str = Depends(caller)
    ) -> wire.CheckpointsList:
        found = checkpoints.of_tenant(state.registry, state.samplers, tenant)
        page = [await checkpoints.described(c) for c in found[offset : offset + limit]]
        return wire.CheckpointsList(
            checkpoints=page, cursor=wire.Cursor(offset=offset, limit=limit, total_count=len(found))
        )

    @router.api_route(
        "/api/v1/training_runs/{training_run_id}/checkpoints/{checkpoint_id:path}/publish", methods=["POST", "DELETE"]
    )
    async def publish(training_run_id: str, checkpoint_id: str) -> None:
        raise HTTPException(
            400,
            "publishing checkpoints is not served: roost tinker serve keeps each checkpoint to the API key that "
            "made it; give a collaborator their own key and a copy of the checkpoint's files",
        )

    @router.delete("/api/v1/training_runs/{training_run_id}/checkpoints/{checkpoint_id:path}")
    async def delete_checkpoint(training_run_id: str, checkpoint_id: str, tenant: str = Depends(caller)) -> Response:
        known(state, lambda: state.registry.run(training_run_id, tenant))
        _checkpoint_kind(checkpoint_id)
        path = f"tinker://{training_run_id}/{checkpoint_id}"
        try:
            await checkpoints.delete(state.registry, state.samplers, tenant, path)
        except LookupError as exc:
            raise HTTPException(404, str(exc)) from None
        return Response(status_code=204)

    @router.post("/api/v1/weights_info")
    async def weights_info(body: wire.WeightsInfoRequest, tenant: str = Depends(caller)) -> wire.WeightsInfo:
        saved = known(state, lambda: state.registry.state(body.tinker_path, tenant))
        lora = saved.lora
        if lora is None:
            return wire.WeightsInfo(base_model=saved.base_model, is_lora=False)
        return wire.WeightsInfo(
            base_model=saved.base_model,
            is_lora=True,
            lora_rank=lora.rank,
            train_unembed=lora.train_unembed,
            train_mlp=lora.train_mlp,
            train_attn=lora.train_attn,
        )

    return router


def _checkpoint_kind(checkpoint_id: str) -> str:
    segment, _, name = checkpoint_id.partition("/")
    if segment not in checkpoints.SEGMENTS or not name:
        raise HTTPException(
            400,
            f"checkpoint id {checkpoint_id!r} is neither weights/<name> nor sampler_weights/<name>; "
            "send the part of its tinker path after the training run id",
        )
    return checkpoints.SEGMENTS[segment]


async def _described_run(state: ServerState, run: TrainingRun) -> wire.TrainingRun:
    found = checkpoints.of_run(state.registry, state.samplers, run.tenant, run.training_run_id)
    last = {kind: next((c for c in reversed(found) if c.kind == kind), None) for kind in ("training", "sampler")}
    described = {k: None if c is None else await checkpoints.described(c) for k, c in last.items()}
    return wire.TrainingRun(
        training_run_id=run.training_run_id,
        base_model=run.base_model,
        model_owner=run.tenant,
        is_lora=run.lora_rank is not None,
        lora_rank=run.lora_rank,
        last_request_time=datetime.fromtimestamp(run.last_request, UTC),
        last_checkpoint=described["training"],
        last_sampler_checkpoint=described["sampler"],
    )
