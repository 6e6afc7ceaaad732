"""The control plane's engine routes (admin key): list the engines behind the gateway, add one at
run time (refused when it serves another model), remove one (its sessions move on their next
call), and the weight-sync barrier (`POST /admin/weight_version`)."""

from __future__ import annotations

import asyncio

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from roost.rollout.gateway.control.wire import AddEngine, EngineList, EngineView, SetWeightVersion
from roost.rollout.gateway.core.auth import admin_only
from roost.rollout.gateway.core.errors import Conflict, InvalidRequest, NotFound
from roost.rollout.gateway.core.http_util import guarded, parse, read_body
from roost.rollout.gateway.core.router import EngineMismatch, EngineSlot, Router
from roost.rollout.gateway.gateway import Gateway, GatewayStartupError

CLOSE_WAIT_S = 600.0  # a removed engine's client stays open this long for its calls in flight


def _json(answer: EngineView | EngineList, status: int = 200) -> Response:
    return Response(orjson.dumps(answer.model_dump()), status_code=status, media_type="application/json")


def engine_view(router: Router, slot: EngineSlot) -> EngineView:
    return EngineView(
        engine_id=slot.engine_id,
        url=slot.url,
        state=slot.state,
        in_flight=slot.in_flight,
        calls=slot.calls,
        sessions=router.sessions_on(slot.engine_id),
        weight_version=slot.weight_version,
        error=slot.error,
    )


def engine_list(router: Router) -> EngineList:
    return EngineList(weight_version=router.weight_version, engines=[engine_view(router, e) for e in router.engines])


def _router(gw: Gateway) -> Router:
    if gw.router is None:
        raise Conflict(
            f"the {gw.config.backend} backend forwards to one upstream and routes no engines; "
            "engines are listed behind a token backend (embedded, sglang, vllm)"
        )
    return gw.router


async def _close_when_idle(slot: EngineSlot) -> None:
    """Close a removed engine's client once the calls it was serving finished."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CLOSE_WAIT_S
    while slot.in_flight > 0 and loop.time() < deadline:
        await asyncio.sleep(0.1)
    await slot.client.close()


def routes(gw: Gateway) -> list[Route]:
    closing: set[asyncio.Task] = set()  # removed engines' clients waiting for their calls

    async def list_engines(request: Request) -> Response:
        return _json(engine_list(_router(gw)))

    async def add_engine(request: Request) -> Response:
        router = _router(gw)
        req = parse(AddEngine, await read_body(request, gw.config.max_body_bytes))
        if (known := router.by_url(req.url)) is not None:
            raise Conflict(f"the engine at {req.url} is already behind this gateway as {known.engine_id}")
        try:
            slot, info = await gw.join(req.url, wait=False)
        except (EngineMismatch, GatewayStartupError) as exc:
            raise InvalidRequest(str(exc), param="url") from None
        if not info:
            router.remove(slot.engine_id)
            await slot.client.close()
            raise InvalidRequest(
                f"the engine at {req.url} did not answer /get_model_info; start it first, then add it again",
                param="url",
            )
        return _json(engine_view(router, slot), 201)

    async def remove_engine(request: Request) -> Response:
        router = _router(gw)
        engine_id = request.path_params["engine_id"]
        if router.get(engine_id) is None:
            known = ", ".join(f"{e.engine_id} ({e.url})" for e in router.engines)
            raise NotFound(f"no engine {engine_id!r} behind this gateway; its engines: {known}")
        if len(router.engines) == 1:
            raise Conflict(f"{engine_id} is this gateway's last engine: add another before removing it")
        slot = router.remove(engine_id)
        task = asyncio.create_task(_close_when_idle(slot))
        closing.add(task)
        task.add_done_callback(closing.discard)
        return _json(engine_view(router, slot))

    async def set_weight_version(request: Request) -> Response:
        router = _router(gw)
        req = parse(SetWeightVersion, await read_body(request, gw.config.max_body_bytes))
        await router.barrier(req.weight_version)
        return _json(engine_list(router))

    def admin(endpoint: str, handler):
        return guarded(endpoint, gw.metrics, admin_only(gw.config.admin_key, handler))

    return [
        Route("/admin/engines", admin("engines", list_engines), methods=["GET"]),
        Route("/admin/engines", admin("engines", add_engine), methods=["POST"]),
        Route("/admin/engines/{engine_id}", admin("engines", remove_engine), methods=["DELETE"]),
        Route("/admin/weight_version", admin("weight_version", set_weight_version), methods=["POST"]),
    ]
