"""The training routes: create_model, get_info, forward_backward and optim_step.

Each queues its work for the training thread in its session's lane of the fair training queue
(`fair_queue.py`) and answers with a future; a model is found only among the caller's tenant's.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request

from . import codec, losses, wire
from .futures import Outcome
from .routes_common import PROTO, ServerState, caller, known
from .sessions import TrainingModel


def training_router(state: ServerState) -> APIRouter:
    router = APIRouter()

    @router.post("/api/v1/create_model")
    async def create_model(body: wire.CreateModelRequest, tenant: str = Depends(caller)) -> dict[str, Any]:
        known(state, lambda: state.registry.open_session(body.session_id, tenant))
        if body.base_model not in state.base_models:
            raise HTTPException(
                400,
                f"unknown base_model {body.base_model!r}; this server trains {sorted(state.base_models)} "
                "(see GET /api/v1/get_server_capabilities)",
            )
        _check_rank(state, body.lora_config)
        model_id = f"{body.session_id}:train:{body.model_seq_id}"
        if not state.registry.reserve(model_id):
            raise HTTPException(409, f"model {model_id!r} exists already; use a new model_seq_id")

        async def work() -> Outcome:
            try:
                backend = await state.run_training(
                    state.make_backend, state.base_models[body.base_model], body.lora_config
                )
            finally:
                state.registry.pending.discard(model_id)
            state.registry.add_model(
                TrainingModel(model_id, body.session_id, tenant, body.base_model, body.lora_config, backend)
            )
            return Outcome(json={"type": "create_model", "model_id": model_id})

        request_id = state.futures.submit(work, tenant=tenant, lane=body.session_id, label="create_model")
        return {"request_id": request_id, "model_id": model_id}

    @router.post("/api/v1/get_info")
    async def get_info(body: wire.GetInfoRequest, tenant: str = Depends(caller)) -> dict[str, Any]:
        model = known(state, lambda: state.registry.model(body.model_id, tenant))
        folder = state.base_models[model.base_model]
        return wire.GetInfoResponse(
            model_data=wire.ModelData(model_name=model.base_model, tokenizer_id=str(folder)),
            model_id=model.model_id,
            is_lora=model.backend.lora is not None,
            lora_rank=None if model.backend.lora is None else model.backend.lora.rank,
        ).model_dump()

    @router.post("/api/v1/forward_backward")
    async def forward_backward(request: Request, tenant: str = Depends(caller)) -> dict[str, Any]:
        if PROTO not in request.headers.get("content-type", ""):
            raise HTTPException(415, f"forward_backward takes a ForwardBackwardRequest protobuf ({PROTO})")
        try:
            body = codec.decompress(await request.body(), request.headers.get("content-encoding"))
            call = codec.decode_forward_backward(body)
        except codec.BodyError as exc:
            raise HTTPException(400, str(exc)) from None
        model = known(state, lambda: state.registry.model(call.model_id, tenant))
        _check_lengths(call, state.context_lengths[model.base_model])
        try:
            config = losses.loss_config(call.loss_fn, call.loss_fn_config)
        except losses.LossInputError as exc:
            raise HTTPException(400, str(exc)) from None

        async def work() -> Outcome:
            result = await state.run_training(
                model.backend.forward_backward, call.data, call.loss_fn, config, not call.forward_only
            )
            outputs = [
                {"logprobs": lp, "elementwise_loss": loss} for lp, loss in zip(result.logprobs, result.elementwise_loss)
            ]
            return Outcome(proto=codec.encode_forward_backward_output(outputs, {"loss:sum": result.loss}))

        label = "forward" if call.forward_only else "forward_backward"
        request_id = state.futures.submit(work, tenant=tenant, lane=model.session_id, label=label)
        return {"request_id": request_id, "model_id": call.model_id}

    @router.post("/api/v1/optim_step")
    async def optim_step(body: wire.OptimStepRequest, tenant: str = Depends(caller)) -> dict[str, Any]:
        model = known(state, lambda: state.registry.model(body.model_id, tenant))

        async def work() -> Outcome:
            metrics = await state.run_training(model.backend.optim_step, body.adam_params)
            return Outcome(json={"metrics": metrics})

        request_id = state.futures.submit(work, tenant=tenant, lane=model.session_id, label="optim_step")
        return {"request_id": request_id, "model_id": body.model_id}

    return router


def _check_rank(state: ServerState, lora: wire.LoraConfig | None) -> None:
    if lora is not None and lora.rank > state.max_lora_rank:
        raise HTTPException(
            400,
            f"LoRA rank {lora.rank} is past this server's limit of {state.max_lora_rank} (--max-lora-rank); "
            f"ask for a rank of at most {state.max_lora_rank}",
        )


def _check_lengths(call: codec.ForwardBackwardCall, context_length: int) -> None:
    for index, datum in enumerate(call.data):
        if len(datum.tokens) > context_length:
            raise HTTPException(
                400,
                f"datum {index} has {len(datum.tokens)} tokens; the model's context is {context_length}: "
                "truncate or split it",
            )
