"""The HTTP env server: a thin FastAPI layer over an `EpisodeManager`.

Routes and wire types are listed in `roost.envs.wire`. Errors map to statuses here
and nowhere else; bodies always look like `{"error": {"type", "message"}}`.
"""

from __future__ import annotations

import contextlib
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from roost.envs import errors, wire
from roost.envs.episodes import EpisodeManager, EpisodeRecord
from roost.envs.limits import BodySizeLimit
from roost.metrics_http import metrics_response
from roost.serving.json_bounds import load_json
from roost.tracing import Tracing

log = logging.getLogger(__name__)

STATUS = {
    errors.BadRequestError: 400,
    errors.UnknownTaskError: 404,
    errors.EpisodeNotFoundError: 404,
    errors.NoWorkspaceError: 404,
    errors.EpisodeFinishedError: 409,
    errors.InvalidActionError: 422,
    errors.CapacityError: 429,
    errors.EnvFaultError: 500,
}


def _errors(*statuses: int) -> dict[int | str, dict]:
    """OpenAPI entries for the error answers of a route (the body is always `ErrorBody`)."""
    return {status: {"model": wire.ErrorBody, "description": DESCRIBE[status]} for status in statuses}


DESCRIBE = {
    400: "Bad request",
    404: "No such task or episode",
    409: "The episode is finished",
    413: "Request body too large",
    422: "Invalid body or invalid action",
    429: "At capacity: retry after Retry-After seconds",
    500: "Environment fault (type env_error); the episode ends as failed",
}


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    body = wire.ErrorBody(error=wire.ErrorDetail(type=code, message=message))
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def create_app(manager: EpisodeManager, *, max_body_bytes: int = 1 << 20, tracing: Tracing | None = None) -> FastAPI:
    """`tracing`: a server span per request, `env.reset` and `env.step` spans (stopped with the app)."""
    tracing = tracing or Tracing()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await manager.start()  # a no-op when the caller started it
        try:
            yield
        finally:
            await manager.stop()
            tracing.shutdown()

    app = FastAPI(title="roost env server", lifespan=lifespan)
    app.add_middleware(BodySizeLimit, max_bytes=max_body_bytes)
    _add_error_handlers(app)
    _add_routes(app, manager, tracing)
    return tracing.instrument_app(app)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(errors.EnvError)
    async def env_error(request: Request, exc: errors.EnvError) -> JSONResponse:
        status = next((code for cls, code in STATUS.items() if isinstance(exc, cls)), 500)
        headers = {"Retry-After": f"{exc.retry_after:.0f}"} if isinstance(exc, errors.CapacityError) else None
        if status >= 500:
            log.warning("env fault on %s %s: %s", request.method, request.url.path, exc)
        return error_response(status, exc.code, str(exc), headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # FastAPI's own answers (unparseable body, unknown route, wrong method) in the server's error shape.
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, errors.BadRequestError.code)
        return error_response(exc.status_code, code, str(exc.detail), getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(422, errors.BadRequestError.code, f"invalid request: {wire.problems(exc.errors())}")


# The step route parses its own body (below), so FastAPI cannot see its schema: say it here.
STEP_BODY = {
    "requestBody": {"required": True, "content": {"application/json": {"schema": wire.inline_schema(wire.StepRequest)}}}
}


def step_request(body: bytes) -> wire.StepRequest:
    """Parse a step body within `roost.serving.json_bounds`. FastAPI's own parsing would answer a body
    nested 1,000 deep, or an integer of 5,000 digits, with an opaque 400 no runner can score."""
    try:
        # {"action": {"arguments": ...}}: the arguments sit two levels down
        return wire.StepRequest.of_body(
            load_json(body.decode(), "tool-call arguments", enclosing=2, error=errors.InvalidActionError)
        )
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from None
    except ValueError as exc:  # not UTF-8 or not JSON (an InvalidActionError is no ValueError)
        raise RequestValidationError([{"loc": ("body",), "msg": f"not JSON ({exc})"}]) from None


def _status(manager: EpisodeManager, record: EpisodeRecord) -> wire.EpisodeView:
    return wire.EpisodeView(
        episode_id=record.id,
        task_id=record.task_id,
        state=record.state,
        steps=record.steps,
        total_reward=record.total_reward,
        created_at=record.created_at,
        last_active_at=record.last_active_at,
        lease_expires_at=manager.lease_expires_at(record),
        error=record.error,
    )


def _add_routes(app: FastAPI, manager: EpisodeManager, tracing: Tracing) -> None:
    @app.post("/episodes", response_model=wire.EpisodeCreated, responses=_errors(400, 404, 413, 422, 429, 500))
    async def create_episode(request: wire.ResetRequest) -> wire.EpisodeCreated:
        with tracing.span("env.reset", {"roost.task_id": request.task_id, "roost.split": request.split}) as span:
            episode_id, reset = await manager.create(
                task_id=request.task_id, seed=request.seed, split=request.split, options=request.options
            )
            if span is not None:
                span.set_attributes({"roost.episode_id": episode_id, "roost.task_id": reset.task_id})
        return wire.EpisodeCreated(
            episode_id=episode_id,
            task_id=reset.task_id,
            observation=wire.ObservationWire.of(reset.observation),
            tools=reset.tools,
            info=reset.info,
        )

    @app.post(
        "/episodes/{episode_id}/step",
        response_model=wire.StepResponse,
        responses=_errors(400, 404, 409, 413, 422, 500),
        openapi_extra=STEP_BODY,
    )
    async def step_episode(episode_id: str, request: Request) -> wire.StepResponse:
        with tracing.span("env.step", {"roost.episode_id": episode_id}) as span:
            try:
                action = step_request(await request.body()).to_protocol()
            except errors.InvalidActionError as exc:
                await manager.refuse(episode_id, exc)
            step = await manager.step(episode_id, action)
            if span is not None:
                span.set_attributes(
                    {
                        "roost.reward": step.reward,
                        "roost.terminated": step.terminated,
                        "roost.truncated": step.truncated,
                    }
                )
        return wire.StepResponse(
            episode_id=episode_id,
            observation=wire.ObservationWire.of(step.observation),
            reward=step.reward,
            terminated=step.terminated,
            truncated=step.truncated,
            info=step.info,
            tools=step.tools,
        )

    @app.get(
        "/episodes/{episode_id}/workspace",
        response_class=Response,
        responses={200: {"content": {"application/gzip": {}}}, **_errors(404, 409, 500)},
    )
    async def get_workspace(episode_id: str) -> Response:
        """The episode's working tree as a gzip'd tar; 404 `no_workspace` for envs without one."""
        return Response(await manager.workspace(episode_id), media_type="application/gzip")

    @app.get("/episodes/{episode_id}", response_model=wire.EpisodeView, responses=_errors(404))
    async def get_episode(episode_id: str) -> wire.EpisodeView:
        return _status(manager, manager.get(episode_id))

    @app.delete("/episodes/{episode_id}", response_model=wire.EpisodeView, responses=_errors(404, 500))
    async def delete_episode(episode_id: str) -> wire.EpisodeView:
        return _status(manager, await manager.delete(episode_id))

    @app.get("/tasks", response_model=wire.TaskList, responses=_errors(400, 422, 500))
    async def list_tasks(split: str = "train") -> wire.TaskList:
        tasks = await manager.tasks(split)
        return wire.TaskList(
            split=split, tasks=[wire.TaskWire(id=t.id, split=t.split, metadata=t.metadata) for t in tasks]
        )

    @app.get("/info", response_model=wire.EnvInfoResponse)
    async def info() -> wire.EnvInfoResponse:
        i = manager.info
        return wire.EnvInfoResponse(
            name=i.name,
            version=i.version,
            description=i.description,
            tools=i.tools,
            splits=list(i.splits),
            max_episodes=manager.config.max_episodes,
            lease_s=manager.config.lease_s,
            versions=i.versions,
        )

    @app.get("/health", response_model=wire.Health, responses={503: {"model": wire.Health}})
    async def health() -> JSONResponse:
        alive, wanted = manager.capacity()
        body = wire.Health(
            status="ok" if alive >= wanted else "degraded",
            live_episodes=manager.live,
            workers=wire.WorkerCount(alive=alive, wanted=wanted),
        )
        return JSONResponse(body.model_dump(), status_code=200 if body.status == "ok" else 503)

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics(request: Request) -> Response:
        return metrics_response(manager.metrics.registry, request)
