"""The session routes (handshake, sessions, heartbeat, capabilities, futures) and the router of
every Tinker route."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from . import wire
from .external_routes import external_router
from .futures import RequestFailure
from .rest_routes import rest_router
from .routes_common import PROTO, ServerState, caller, known
from .sampling_routes import sampling_router
from .state_routes import state_router
from .training_routes import training_router

LONG_POLL_S = 20.0
"""How long retrieve_future holds a poll for a running request (the SDK waits 45 s for an answer)."""


def build_router(state: ServerState) -> APIRouter:
    router = APIRouter()

    @router.get("/health")
    @router.get("/api/v1/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @router.post("/api/v1/client/config")
    async def client_config(body: wire.ClientConfigRequest) -> dict[str, Any]:
        # No JWT exchange (roost's keys are API keys) and plain httpx (loopback needs no pyqwest).
        return {
            "pjwt_auth_enabled": False,
            "proto_compress_fwdbwd": state.compress_fwdbwd,
            "use_pyqwest_transport": False,
        }

    @router.post("/api/v1/client/dynamic_config")
    async def dynamic_config(body: wire.ClientConfigRequest) -> dict[str, Any]:
        return {}

    @router.post("/api/v1/telemetry")
    async def telemetry(request: Request) -> dict[str, str]:
        return {"status": "accepted"}  # the SDK's own telemetry: accepted and dropped

    @router.get("/api/v1/get_server_capabilities")
    async def capabilities() -> dict[str, Any]:
        models = [
            wire.SupportedModel(
                model_name=name, max_context_length=state.context_lengths[name], trainable=True, sampleable=True
            )
            for name in state.base_models
        ]
        return {
            "supported_models": [m.model_dump() for m in models],
            "full_weight": state.full_weight,
            "lora": not state.full_weight,
        }

    @router.post("/api/v1/create_session")
    async def create_session(body: wire.CreateSessionRequest, tenant: str = Depends(caller)) -> dict[str, Any]:
        session = state.registry.new_session(body.tags, body.sdk_version, tenant)
        return {"type": "create_session", "session_id": session.session_id}

    @router.post("/api/v1/session_heartbeat")
    async def heartbeat(body: wire.SessionHeartbeatRequest, tenant: str = Depends(caller)) -> dict[str, str]:
        known(state, lambda: state.registry.heartbeat(body.session_id, tenant))
        return {"type": "session_heartbeat"}

    @router.post("/api/v1/sessions/{session_id}/finish")
    async def finish_session(
        session_id: str, body: wire.FinishSessionRequest, tenant: str = Depends(caller)
    ) -> dict[str, Any]:
        # Work already queued holds its model and still runs; requests naming the models now get 404.
        dropped = known(state, lambda: state.registry.finish(session_id, body.reason.type, tenant))
        return {"session_id": session_id, "models_dropped": [m.model_id for m in dropped]}

    @router.post("/api/v1/retrieve_future")
    async def retrieve_future(body: wire.FutureRetrieveRequest, tenant: str = Depends(caller)) -> Response:
        if not state.futures.known(body.request_id, tenant):
            raise HTTPException(
                404, f"no pending request {body.request_id!r}; it was never made or was retrieved already"
            )
        # A long poll: the SDK retries try_again at once, so answering early would make it spin.
        if not await state.futures.wait(body.request_id, LONG_POLL_S):
            return JSONResponse(wire.TryAgain(request_id=body.request_id).model_dump())
        try:
            outcome = state.futures.take(body.request_id)
        except RequestFailure as exc:
            return JSONResponse(wire.RequestFailed(error=str(exc), category=exc.category).model_dump())
        except Exception as exc:  # a server fault: reported, never a dropped connection
            return JSONResponse(
                wire.RequestFailed(error=f"{type(exc).__name__}: {exc}", category="server").model_dump()
            )
        if outcome.proto is not None:
            return Response(outcome.proto, media_type=PROTO)
        return JSONResponse(outcome.json)

    router.include_router(training_router(state))
    router.include_router(sampling_router(state))
    router.include_router(state_router(state))
    router.include_router(rest_router(state))
    router.include_router(external_router(state))
    return router
