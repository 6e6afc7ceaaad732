"""The Tinker routes: thin front-ends that check a request, queue its work, and answer polls.

Input that can be checked at once (an unknown base model or model id, a body that does not parse)
is refused at once with a 4xx whose `detail` says what was wrong; errors found while the work runs
come back from `retrieve_future` as `{"error", "category"}`, which the SDK raises as
`RequestFailedError`.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from . import codec, wire
from .futures import FutureQueue, Outcome, RequestFailure
from .sampling import SampleCall, Samplers
from .sessions import Registry, TrainingModel, UnknownName

PROTO = "application/x-protobuf"
LONG_POLL_S = 20.0
"""How long retrieve_future holds a poll for a running request (the SDK waits 45 s for an answer)."""


@dataclass
class ServerState:
    """Everything the routes share, passed explicitly (no module state)."""

    base_models: dict[str, Path]
    """Model name clients use → its Hugging Face folder."""
    registry: Registry
    futures: FutureQueue
    run_training: Callable[..., Any]
    """Run a blocking call on the one training thread: `await run_training(fn, *args)`."""
    make_backend: Callable[[Path, wire.LoraConfig | None], Any]
    compress_fwdbwd: bool
    context_lengths: dict[str, int]
    """Base model name → its longest prompt plus completion (as the engine caps it)."""
    samplers: Samplers
    weights_root: Path
    """Where saved sampler weights are exported, one folder per save."""


def _known(state: ServerState, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except UnknownName as exc:
        raise HTTPException(404, str(exc)) from None


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
        return {"supported_models": [m.model_dump() for m in models], "full_weight": True, "lora": False}

    @router.post("/api/v1/create_session")
    async def create_session(body: wire.CreateSessionRequest) -> dict[str, Any]:
        session = state.registry.new_session(body.tags, body.sdk_version)
        return {"type": "create_session", "session_id": session.session_id}

    @router.post("/api/v1/session_heartbeat")
    async def heartbeat(body: wire.SessionHeartbeatRequest) -> dict[str, str]:
        _known(state, lambda: state.registry.heartbeat(body.session_id))
        return {"type": "session_heartbeat"}

    @router.post("/api/v1/create_model")
    async def create_model(body: wire.CreateModelRequest) -> dict[str, Any]:
        _known(state, lambda: state.registry.session(body.session_id))
        if body.base_model not in state.base_models:
            raise HTTPException(
                400,
                f"unknown base_model {body.base_model!r}; this server trains {sorted(state.base_models)} "
                "(see GET /api/v1/get_server_capabilities)",
            )
        model_id = f"{body.session_id}:train:{body.model_seq_id}"
        if model_id in state.registry.models:
            raise HTTPException(409, f"model {model_id!r} exists already; use a new model_seq_id")

        async def work() -> Outcome:
            backend = await state.run_training(state.make_backend, state.base_models[body.base_model], body.lora_config)
            state.registry.add_model(
                TrainingModel(model_id, body.session_id, body.base_model, body.lora_config, backend)
            )
            return Outcome(json={"type": "create_model", "model_id": model_id})

        return {"request_id": state.futures.submit(work, serial=True), "model_id": model_id}

    @router.post("/api/v1/get_info")
    async def get_info(body: wire.GetInfoRequest) -> dict[str, Any]:
        model = _known(state, lambda: state.registry.model(body.model_id))
        folder = state.base_models[model.base_model]
        return wire.GetInfoResponse(
            model_data=wire.ModelData(model_name=model.base_model, tokenizer_id=str(folder)),
            model_id=model.model_id,
            is_lora=model.lora is not None,
            lora_rank=None if model.lora is None else model.lora.rank,
        ).model_dump()

    @router.post("/api/v1/forward_backward")
    async def forward_backward(request: Request) -> dict[str, Any]:
        if PROTO not in request.headers.get("content-type", ""):
            raise HTTPException(415, f"forward_backward takes a ForwardBackwardRequest protobuf ({PROTO})")
        try:
            body = codec.decompress(await request.body(), request.headers.get("content-encoding"))
            call = codec.decode_forward_backward(body)
        except codec.BodyError as exc:
            raise HTTPException(400, str(exc)) from None
        model = _known(state, lambda: state.registry.model(call.model_id))
        if call.loss_fn != "cross_entropy":
            raise HTTPException(
                400, f"loss_fn {call.loss_fn!r} is not served yet; this server runs cross_entropy (docs/tinker.md)"
            )

        async def work() -> Outcome:
            result = await state.run_training(model.backend.cross_entropy, call.data, not call.forward_only)
            outputs = [{"logprobs": lp, "elementwise_loss": -lp * w} for lp, w in zip(result.logprobs, _weights(call))]
            return Outcome(proto=codec.encode_forward_backward_output(outputs, {"loss:sum": result.loss}))

        return {"request_id": state.futures.submit(work, serial=True), "model_id": call.model_id}

    @router.post("/api/v1/optim_step")
    async def optim_step(body: wire.OptimStepRequest) -> dict[str, Any]:
        model = _known(state, lambda: state.registry.model(body.model_id))

        async def work() -> Outcome:
            metrics = await state.run_training(model.backend.optim_step, body.adam_params)
            return Outcome(json={"metrics": metrics})

        return {"request_id": state.futures.submit(work, serial=True), "model_id": body.model_id}

    @router.post("/api/v1/save_weights_for_sampler")
    async def save_weights_for_sampler(body: wire.SaveWeightsForSamplerRequest) -> dict[str, Any]:
        model = _known(state, lambda: state.registry.model(body.model_id))
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
            session = state.samplers.add(model.base_model, folder, model.session_id, path)
            if path is None:
                return Outcome(
                    json={"type": "save_weights_for_sampler", "sampling_session_id": session.sampling_session_id}
                )
            state.samplers.saved[path] = session
            return Outcome(json={"type": "save_weights_for_sampler", "path": path})

        return {"request_id": state.futures.submit(work, serial=True), "model_id": model.model_id}

    @router.post("/api/v1/create_sampling_session")
    async def create_sampling_session(body: wire.CreateSamplingSessionRequest) -> dict[str, Any]:
        _known(state, lambda: state.registry.session(body.session_id))
        if body.model_path is not None:
            if body.model_path not in state.samplers.saved:
                raise HTTPException(
                    404,
                    f"no saved sampler weights at {body.model_path!r}; save_weights_for_sampler(name) returns the path",
                )
            saved = state.samplers.saved[body.model_path]
            session = state.samplers.add(saved.base_model, saved.folder, body.session_id, body.model_path)
        elif body.base_model in state.base_models:
            session = state.samplers.add(body.base_model, state.base_models[body.base_model], body.session_id)
        else:
            raise HTTPException(
                400,
                f"unknown base_model {body.base_model!r}; this server samples {sorted(state.base_models)} or a saved model_path",
            )
        return {"type": "create_sampling_session", "sampling_session_id": session.sampling_session_id}

    @router.get("/api/v1/samplers/{sampler_id:path}")
    async def get_sampler(sampler_id: str) -> dict[str, Any]:
        session = _known(state, lambda: state.samplers.session(sampler_id))
        return {"sampler_id": sampler_id, "base_model": session.base_model, "model_path": session.model_path}

    @router.post("/api/v1/asample")
    async def asample(body: wire.SampleRequest) -> dict[str, Any]:
        if body.sampling_session_id is None:
            raise HTTPException(400, "asample needs a sampling_session_id; create a SamplingClient first")
        session = _known(state, lambda: state.samplers.session(body.sampling_session_id))
        if unserved := body.unserved():
            raise HTTPException(400, f"{', '.join(unserved)} not served yet (docs/tinker.md); leave them unset")
        call = _sample_call(body, state.context_lengths[session.base_model])

        async def work() -> Outcome:
            sequences, prompt = await state.samplers.sample(session, call)
            return Outcome(proto=codec.encode_sample_response(sequences, prompt))

        request_id = state.futures.submit(work)
        return {"request_id": request_id, "sample_sequence_ids": [f"{request_id}:{i}" for i in range(body.num_samples)]}

    @router.post("/api/v1/retrieve_future")
    async def retrieve_future(body: wire.FutureRetrieveRequest) -> Response:
        if not state.futures.known(body.request_id):
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

    return router


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
    )


def _weights(call: codec.ForwardBackwardCall):
    import numpy as np

    return [d.inputs.get("weights", np.ones(len(d.tokens), dtype=np.float32)).reshape(-1) for d in call.data]
