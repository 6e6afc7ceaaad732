"""The engine's HTTP server: SGLang's native API subset (docs/architecture.md lists it)."""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from typing import Any

import orjson
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError

from roost.metrics_http import metrics_response
from roost.rollout.engine.engine import Completion, Engine
from roost.rollout.engine.metrics import EngineMetrics
from roost.rollout.engine.prompt_scores import prompt_logprobs
from roost.rollout.engine.scripted_sampler import Script, ScriptedSampler, ScriptError
from roost.rollout.engine.sessions import SessionTable, Turn
from roost.rollout.engine.weight_uploads import WeightReceiver
from roost.rollout.engine.weights import WeightMismatch
from roost.rollout.engine_api import routed_experts
from roost.rollout.engine_api.model_identity import config_digest, tokenizer_fingerprint
from roost.rollout.engine_api.weight_upload import MAX_CHUNK_BYTES, BeginUpload
from roost.rollout.engine_api.wire import (
    AbortRequest,
    CloseSessionRequest,
    LoadLoraRequest,
    OpenSessionRequest,
    PauseRequest,
    RequestError,
    UnloadLoraRequest,
    UpdateWeightsRequest,
    UpdateWeightVersionRequest,
    parse_generate,
    parse_sampling_params,
)
from roost.rollout.hangup import ClientGone, cancelled_on_hangup
from roost.rollout.keys import presented_key, same_key
from roost.serving.body import BodyOverLimit, read_limited
from roost.tracing import Tracing

MAX_BODY_BYTES = 16 * 1024 * 1024


def error(
    status: int, message: str, kind: str = "invalid_request_error", headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": kind, "code": status}}, status_code=status, headers=headers
    )


async def read_json(request: Request) -> Any:
    try:
        body = await read_limited(request, MAX_BODY_BYTES)
    except BodyOverLimit as exc:
        raise RequestError(str(exc), 413) from None
    if not body:
        return {}
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RequestError(f"malformed JSON: {exc}") from exc


def _validation_message(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:5])


def _meta(
    engine: Engine, rid: str, prompt_len: int, done: Completion, with_logprobs: bool, with_text: bool, started: float
) -> dict:
    meta: dict[str, Any] = {
        "id": rid,
        "finish_reason": done.finish_reason,
        "prompt_tokens": prompt_len,
        "completion_tokens": len(done.output_ids),
        "cached_tokens": done.cached_tokens,
        "weight_version": done.weight_version,
    }
    if done.constraint is not None:
        meta["constraint"] = done.constraint
    if done.routed_experts is not None:
        meta["routed_experts"] = routed_experts.encode(done.routed_experts)
    if with_logprobs:
        texts = [engine.decode([t], False) if with_text else None for t in done.output_ids]
        meta["output_token_logprobs"] = [[lp, t, x] for lp, t, x in zip(done.logprobs, done.output_ids, texts)]
    if done.finish_reason is not None:
        meta["e2e_latency"] = time.perf_counter() - started
        if done.first_token_at is not None:
            # roost's: the time to the first token, which SGLang's answers do not carry
            meta["prefill_latency"] = done.first_token_at - started
    return meta


def _wants_input_logprobs(req) -> bool:
    """SGLang's ask for the prompt's logprobs: `return_logprob` with `logprob_start_len` >= 0
    (its default, -1, asks for the sampled tokens' only)."""
    return bool(req.return_logprob) and req.logprob_start_len is not None and req.logprob_start_len >= 0


def _input_logprobs(engine: Engine, ids: list[int], scores, req) -> list[list]:
    """SGLang's `input_token_logprobs`: [logprob, token id, text] from `logprob_start_len` on; the
    first token of the prompt, which has no context, has logprob None."""
    start = min(req.logprob_start_len, len(ids))
    texts = [engine.decode([t], False) if req.return_text_in_logprobs else None for t in ids[start:]]
    values = [None if math.isnan(v) else float(v) for v in scores[start:]]
    return [[lp, t, x] for lp, t, x in zip(values, ids[start:], texts)]


def _answer_text(engine: Engine, done: Completion, params) -> str:
    ids = done.output_ids
    reason = done.finish_reason or {}
    text = engine.decode(ids, params.skip_special_tokens)
    matched = reason.get("matched")
    if isinstance(matched, str) and not params.no_stop_trim:
        cut = text.find(matched)
        text = text[:cut] if cut >= 0 else text
    return text


def create_app(engine: Engine, api_key: str, tracing: Tracing | None = None) -> FastAPI:
    """The routes that change the engine (weights, LoRA adapters, pause, cache, script, aborting
    every request) take `api_key` as a bearer token or `x-api-key`; `/generate`, aborting one request by its
    rid, the info routes, `/health` and `/metrics` are open. `tracing`: a server span per request
    and an `engine.generate` span per generation."""
    tracing = tracing or Tracing()
    app = tracing.instrument_app(FastAPI(title="roost embedded engine", docs_url=None, redoc_url=None))
    sessions = SessionTable(engine.tokenizer.bos_token_id)
    metrics = EngineMetrics(engine, sessions)

    async def control(request: Request) -> None:
        if not same_key(presented_key(request.headers), api_key):
            raise RequestError(
                f"{request.url.path} needs the engine's key as 'Authorization: Bearer <key>'; it is the key given "
                "as --api-key or ROOST_ENGINE_KEY, or the one `roost engine` printed at start",
                401,
            )

    guarded = [Depends(control)]

    @app.exception_handler(RequestError)
    async def _request_error(_: Request, exc: RequestError) -> JSONResponse:
        if exc.status == 401:
            return error(401, str(exc), "authentication_error", {"WWW-Authenticate": "Bearer"})
        return error(exc.status, str(exc))

    @app.exception_handler(ValidationError)
    async def _validation_error(_: Request, exc: ValidationError) -> JSONResponse:
        return error(400, _validation_message(exc))

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/metrics")
    async def prometheus(request: Request) -> Response:
        return metrics_response(metrics.registry, request)

    @app.get("/health_generate")
    async def health_generate() -> Response:
        return Response(status_code=200)

    # read once: a gateway on another node cannot read this engine's folder to compare models
    digests = {
        "tokenizer_digest": tokenizer_fingerprint(engine.config.model_path),
        "config_digest": config_digest(engine.config.model_path),
    }

    @app.get("/get_model_info")
    async def model_info() -> dict:
        return {
            "model_path": str(engine.config.model_path),
            "tokenizer_path": str(engine.config.model_path),
            **digests,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": engine.weight_version,
            "max_context_length": engine.context_length,
            "vocab_size": engine.spec.vocab_size,
            "eos_token_ids": list(engine.spec.eos_token_ids),
            "architecture": engine.spec.family,
            "dtype": engine.config.dtype,
            "sampler": "scripted" if engine.scripted is not None else "model",
        }

    @app.get("/get_server_info")
    async def server_info() -> dict:
        s = engine.scheduler
        return {
            "engine": "roost-embedded",
            "max_running_requests": s.max_running,
            # SGLang's name for its KV pool in tokens: one slot per running request, each a context long
            "max_total_num_tokens": s.cache.slots * s.cache.max_len,
            "context_length": engine.context_length,
            "running": s.running,
            "waiting": s.waiting,
            "paused": s.paused,
            "decode_steps": s.steps,
            "prefill_batches": s.prefill_batches,
            "weight_version": engine.weight_version,
            "return_original_logprob": True,  # logprobs of the raw logits, before temperature
            "max_loras": engine.adapters.limits.max_loras,
            "max_lora_rank": engine.adapters.limits.max_lora_rank,
            "loaded_loras": sorted(engine.adapters.loaded),
            "kv_budget_tokens": s.cache.budget_tokens,
            "kv_retained_tokens": s.cache.retained_tokens,
            "kv_retained_sessions": s.cache.retained_sessions,
        }

    @app.get("/v1/models")
    async def models() -> dict:
        """vLLM's list: the base model, then each loaded LoRA adapter with the base as its parent."""
        base = str(engine.config.model_path)
        card = {"object": "model", "created": int(engine.started_at), "owned_by": "roost"}
        cards = [{"id": base, **card, "root": base, "parent": None, "max_model_len": engine.context_length}]
        for name, adapter in sorted(engine.adapters.loaded.items()):
            cards.append({"id": name, **card, "root": adapter.path, "parent": base, "max_model_len": None})
        return {"object": "list", "data": cards}

    # vLLM's paths, and SGLang's (the same bodies, without /v1).
    @app.post("/v1/load_lora_adapter", dependencies=guarded)
    @app.post("/load_lora_adapter", dependencies=guarded)
    async def load_lora(request: Request) -> dict:
        req = LoadLoraRequest.model_validate(await read_json(request))
        adapter = await engine.load_lora(req.lora_name, req.lora_path, replace=req.load_inplace)
        message = f"Success: LoRA adapter '{adapter.name}' added successfully."
        return {"success": True, "message": message, "lora_name": adapter.name, "rank": adapter.rank}

    @app.post("/v1/unload_lora_adapter", dependencies=guarded)
    @app.post("/unload_lora_adapter", dependencies=guarded)
    async def unload_lora(request: Request) -> dict:
        req = UnloadLoraRequest.model_validate(await read_json(request))
        in_flight = await engine.unload_lora(req.lora_name)
        message = f"Success: LoRA adapter '{req.lora_name}' removed successfully."
        if in_flight:
            message += f" {in_flight} request(s) already admitted finish with it."
        return {"success": True, "message": message, "lora_name": req.lora_name, "in_flight": in_flight}

    @app.post("/generate")
    async def generate(request: Request) -> Response:
        started = time.perf_counter()
        req = parse_generate(await read_json(request))
        params = parse_sampling_params(req.sampling_params)
        if req.image_data and req.session_params is not None and req.session_params.rid is not None:
            raise RequestError(
                "image_data with session_params.rid: a continued request's images are not kept; send the whole "
                "prompt with all its images (session_params.id alone)"
            )
        sent = req.input_ids if req.input_ids is not None else engine.encode(req.text or "")
        turn = sessions.begin(req.session_params, sent, req.rid or uuid.uuid4().hex)
        try:
            return await _generate(request, req, params, turn, started)
        except BaseException:
            sessions.end(turn, None)
            raise

    async def _generate(request: Request, req, params, turn: Turn, started: float) -> Response:
        """The answer to `req`, whose whole prompt is `turn.prompt`; a stream ends `turn` itself."""
        ids, rid = turn.prompt, turn.rid
        if req.stream and _wants_input_logprobs(req):
            raise RequestError(
                "the prompt's logprobs (logprob_start_len >= 0) come with a request that is not streamed"
            )
        if req.image_data and _wants_input_logprobs(req):
            raise RequestError("the prompt's logprobs (logprob_start_len >= 0) are not served for prompts with images")
        plan = await engine.prepare(ids, params, req.lora_path, req.image_data)
        plan.session = req.session_params.id if req.session_params is not None else None
        if req.return_routed_experts:
            engine.check_routed_experts(req.routed_experts_start_len, len(ids), plan.max_new_tokens)
            plan.routed_experts_from = req.routed_experts_start_len
        if req.stream:
            # The stream is sent after this handler returns: its span is parented explicitly.
            chunks = _stream(
                engine, metrics, sessions, turn, plan, params, req, started, tracing, tracing.current().traceparent
            )
            return StreamingResponse(chunks, media_type="text/event-stream")
        try:
            async with cancelled_on_hangup(request.receive):
                with tracing.span("engine.generate", {"roost.rid": rid, "roost.prompt_tokens": len(ids)}) as span:
                    done = await engine.generate(ids, params, rid, plan)
                    _describe(span, done)
        except ClientGone:
            # Cancelling the wait took the request out of the scheduler; no one reads this.
            sessions.end(turn, None)
            return Response(status_code=499)
        sessions.end(turn, _finished_ids(done))
        metrics.answered(len(ids), done, started)
        meta = _meta(engine, rid, len(ids), done, req.return_logprob, req.return_text_in_logprobs, started)
        if _wants_input_logprobs(req):
            scores, _ = await asyncio.to_thread(prompt_logprobs, engine, ids, plan.adapter)
            meta["input_token_logprobs"] = _input_logprobs(engine, ids, scores, req)
        body = {"text": _answer_text(engine, done, params), "output_ids": done.output_ids, "meta_info": meta}
        return Response(orjson.dumps(body), media_type="application/json")

    @app.post("/update_weights_from_disk", dependencies=guarded)
    async def update_weights(request: Request) -> JSONResponse:
        req = UpdateWeightsRequest.model_validate(await read_json(request))
        try:
            version = await engine.update_weights(req.model_path, req.weight_version)
        except WeightMismatch as exc:
            return JSONResponse(
                {
                    "success": False,
                    "message": str(exc),
                    "weight_version": engine.weight_version,
                    "error": {"message": str(exc), "type": "invalid_request_error", "code": 400},
                },
                status_code=400,
            )
        return JSONResponse(
            {
                "success": True,
                "message": "Succeeded to update model weights.",
                "num_paused_requests": 0,
                "weight_version": version,
            }
        )

    receiver = WeightReceiver(engine)

    # Weights sent over HTTP (roost.rollout.engine_api.weight_upload), staged until the commit.
    @app.post("/roost/weights/begin", dependencies=guarded)
    async def weights_begin(request: Request) -> dict:
        begin = BeginUpload.model_validate(await read_json(request))
        return (await receiver.begin(begin)).model_dump()

    @app.post("/roost/weights/{update_id}/chunk", dependencies=guarded)
    async def weights_chunk(update_id: str, request: Request) -> dict:
        try:
            body = await read_limited(request, MAX_CHUNK_BYTES)
        except BodyOverLimit as exc:
            raise RequestError(f"{exc}: send smaller chunks (the sender's chunk byte budget)", 413) from None
        return (await receiver.chunk(update_id, body)).model_dump()

    @app.post("/roost/weights/{update_id}/commit", dependencies=guarded)
    async def weights_commit(update_id: str) -> dict:
        return (await receiver.commit(update_id)).model_dump()

    @app.post("/roost/weights/{update_id}/abort", dependencies=guarded)
    async def weights_abort(update_id: str) -> dict:
        await receiver.abort(update_id)
        return {"success": True, "message": f"update {update_id} aborted; the weights served are unchanged"}

    @app.post("/update_weight_version", dependencies=guarded)
    async def update_weight_version(request: Request) -> dict:
        req = UpdateWeightVersionRequest.model_validate(await read_json(request))
        if req.abort_all_requests:
            raise RequestError(
                "abort_all_requests is not supported by roost's engine: pause generation (or the gateway) "
                "so running requests finish, then set the version with abort_all_requests false"
            )
        version = await engine.set_weight_version(req.new_version)
        return {"success": True, "message": f"weight version set to {version}", "weight_version": version}

    @app.post("/flush_cache", dependencies=guarded)
    async def flush_cache() -> Response:
        await _on_engine_thread(engine, engine.scheduler.cache.forget)
        return Response("Cache flushed.", status_code=200)

    @app.post("/pause_generation", dependencies=guarded)
    async def pause(request: Request) -> dict:
        req = PauseRequest.model_validate(await read_json(request))
        if req.mode not in ("in_place", "abort"):
            raise RequestError(f"pause mode {req.mode!r} is not supported; use in_place or abort")
        engine.scheduler.set_paused(True)
        aborted = 0
        if req.mode == "abort":
            aborted = await _on_engine_thread(engine, engine.scheduler.abort_all)
        return {"success": True, "paused": True, "aborted": aborted}

    @app.post("/abort_request")
    async def abort_request(request: Request) -> Response:
        # One request by its rid is open, as /generate is (the gateway aborts the calls whose
        # clients left); aborting every request is a control action and takes the key.
        req = AbortRequest.model_validate(await read_json(request))
        if not req.rid and not req.abort_all:
            raise RequestError("give the rid of the request to abort, or abort_all: true")
        if req.abort_all:
            await control(request)
        rids = None if req.abort_all else {req.rid}
        await _on_engine_thread(engine, lambda: engine.scheduler.abort(rids))
        return Response(status_code=200)

    @app.post("/open_session")
    async def open_session(request: Request) -> Response:
        # Calls that send their whole prompt need no session opened (their first call names it);
        # calls that continue a stored request (session_params.rid) do, as in SGLang.
        req = OpenSessionRequest.model_validate(await read_json(request))
        session = sessions.open(req, uuid.uuid4().hex)
        return Response(orjson.dumps(session), media_type="application/json")

    @app.post("/close_session")
    async def close_session(request: Request) -> dict:
        # Open as /generate is: the gateway closes the sessions it finishes.
        req = CloseSessionRequest.model_validate(await read_json(request))
        sessions.close(req.session_id)
        freed = await engine.close_session(req.session_id)
        return {"success": True, "session_id": req.session_id, "freed_tokens": freed}

    @app.post("/continue_generation", dependencies=guarded)
    async def resume() -> dict:
        engine.scheduler.set_paused(False)
        return {"success": True, "paused": False}

    @app.post("/roost/scripted_sampler", dependencies=guarded)
    async def set_script(request: Request) -> dict:
        """Replace the scripted sampler's rules (roost extension, for tests and benchmarks)."""
        if engine.config.scripted is None:
            raise RequestError("this engine samples from its model; start it with --sampler scripted to script it", 409)
        script = Script.model_validate(await read_json(request))
        try:
            engine.scripted = ScriptedSampler(script)
        except ScriptError as exc:
            raise RequestError(str(exc)) from exc
        return {"success": True, "rules": len(script.rules)}

    return app


async def _on_engine_thread(engine: Engine, fn) -> Any:
    return await asyncio.wrap_future(engine.scheduler.call(fn))


def _describe(span: Any, done: Completion) -> None:
    if span is not None:
        span.set_attributes(
            {
                "roost.completion_tokens": len(done.output_ids),
                "roost.cached_tokens": done.cached_tokens,
                "roost.weight_version": done.weight_version,
            }
        )


def _finished_ids(done: Completion) -> list[int] | None:
    """The output ids a session's next request may continue: None when the request was aborted."""
    reason = done.finish_reason or {}
    return None if reason.get("type") in (None, "abort") else done.output_ids


async def _stream(
    engine: Engine,
    metrics: EngineMetrics,
    sessions: SessionTable,
    turn: Turn,
    plan,
    params,
    req,
    started: float,
    tracing: Tracing,
    parent: str | None,
):
    ids, rid = turn.prompt, turn.rid
    done = Completion(constraint=plan.constraint_meta())
    finished = None
    try:
        with tracing.span(
            "engine.generate", {"roost.rid": rid, "roost.prompt_tokens": len(ids), "roost.stream": True}, parent=parent
        ) as span:
            async for outputs in engine.stream(ids, plan, skip_special_tokens=params.skip_special_tokens, rid=rid):
                new_ids = done.add(outputs)
                chunk = {
                    "text": _answer_text(engine, done, params),
                    "output_ids": new_ids,  # SGLang streams output_ids incrementally
                    "meta_info": _meta(
                        engine, rid, len(ids), done, req.return_logprob, req.return_text_in_logprobs, started
                    ),
                }
                yield b"data: " + orjson.dumps(chunk) + b"\n\n"
            _describe(span, done)
        finished = _finished_ids(done)
    finally:
        sessions.end(turn, finished)
    metrics.answered(len(ids), done, started)
    yield b"data: [DONE]\n\n"
