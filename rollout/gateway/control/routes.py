"""The control plane: sessions, rewards, advantages, the training samples of groups, pause/resume
(all behind the admin key), health and metrics (open)."""

from __future__ import annotations

import re
import time
from typing import Any

import orjson
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from roost.metrics_http import metrics_response
from roost.outcome import EpisodeOutcome, SessionStatus
from roost.rollout.gateway.control.cursor import cursor_secret
from roost.rollout.gateway.control.samples_page import page_query, read_page
from roost.rollout.gateway.control.wire import (
    Ack,
    AdvantagesAck,
    AgentView,
    CallView,
    CreateSession,
    FinishSession,
    GatewayHealth,
    ImageView,
    PauseRequest,
    PauseState,
    PostAdvantages,
    PostReward,
    ProgramView,
    RewardView,
    SessionCreated,
    SessionDetail,
    SessionList,
    SessionListItem,
    SessionSummary,
)
from roost.rollout.gateway.core.auth import admin_only
from roost.rollout.gateway.core.errors import InvalidRequest, NotFound
from roost.rollout.gateway.core.http_util import guarded, parse, read_body
from roost.rollout.gateway.gateway import Gateway
from roost.rollout.store.program_times import program_times
from roost.rollout.store.records import AdvantageRecord, AgentRecord, CallRecord, RewardRecord, SessionRecord

_SHA256 = re.compile("[0-9a-f]{64}")


def _json(answer: BaseModel, status: int = 200) -> Response:
    # exclude_unset: optional fields a route leaves out (a call's tokens, `drained` on resume)
    # stay out of the body, as the clients and the OpenAPI document expect.
    return Response(
        orjson.dumps(answer.model_dump(exclude_unset=True)), status_code=status, media_type="application/json"
    )


def _base_url(gw: Gateway, request: Request) -> str:
    return (gw.config.public_url or str(request.base_url)).rstrip("/")


def _summary(r: SessionRecord) -> dict[str, Any]:
    """The fields every session answer starts with (`SessionSummary`'s)."""
    return {
        "session_id": r.session_id,
        "group_id": r.group_id,
        "task": r.task,
        "metadata": r.metadata,
        "status": r.status,
        "reasoning_policy": r.reasoning_policy,
        "created_at": r.created_at,
        "finished_at": r.finished_at,
        "outcome": r.outcome,
        "finish_info": r.finish_info,
    }


def _session_status(text: str | None) -> SessionStatus | None:
    if text is None:
        return None
    try:
        return SessionStatus(text)
    except ValueError:
        raise InvalidRequest(
            f"status={text!r} is not a session status; use one of {', '.join(s.value for s in SessionStatus)}",
            param="status",
        ) from None


def _detail(
    r: SessionRecord, calls: list[CallRecord], agents: list[AgentRecord], rewards: list[RewardRecord], tokens: bool
) -> SessionDetail:
    return SessionDetail(
        **_summary(r),
        agents=[AgentView(agent_id=a.agent_id, parent_agent=a.parent_agent) for a in agents],
        calls=[_call_view(c, tokens) for c in calls],
        rewards=[RewardView(reward=x.reward, agent=x.agent_id, call_id=x.call_id, info=x.info) for x in rewards],
        program=ProgramView.of(program_times(calls)),
    )


def _call_view(c: CallRecord, tokens: bool) -> CallView:
    ids = (
        {
            "prompt_ids": list(c.prompt_ids),
            "sampled_ids": list(c.sampled_ids),
            "sampled_logprobs": list(c.sampled_logprobs),
        }
        if tokens
        else {}
    )
    return CallView(
        call_id=c.call_id,
        agent_id=c.agent_id,
        parent_agent=c.parent_agent,
        seq=c.seq,
        endpoint=c.endpoint,
        parent_call_id=c.parent_call_id,
        kind=c.kind,
        reuse=c.reuse,
        shared_prefix_len=c.shared_prefix_len,
        prompt_tokens=len(c.prompt_ids),
        completion_tokens=len(c.sampled_ids),
        finish_reason=c.finish_reason,
        weight_version=c.weight_version,
        timings=c.timings,
        request=c.request,
        response=c.response,
        images=[ImageView(sha256=i.sha256, offset=i.offset, count=i.count) for i in c.images],
        **ids,
    )


def routes(gw: Gateway) -> list[Route]:
    async def create_session(request: Request) -> Response:
        body = await read_body(request, gw.config.max_body_bytes)
        req = parse(CreateSession, body) if body.strip() else CreateSession()
        state, key = await gw.registry.create(
            group_id=req.group_id,
            task=req.task,
            metadata=req.metadata,
            session_id=req.session_id,
            policy=req.reasoning_policy,
        )
        # The calls' parent: the span the body names (the runner's episode), else this request's own.
        body_parent = gw.tracing.incoming({"traceparent": req.traceparent or ""})
        state.trace_parent = body_parent or gw.tracing.current().traceparent
        base = f"{_base_url(gw, request)}/sessions/{state.session_id}/v1"
        return _json(
            SessionCreated(
                session_id=state.session_id,
                key=key,
                base_url=base,
                group_id=req.group_id,
                reasoning_policy=state.record.reasoning_policy,
                created_at=state.record.created_at,
            ),
            201,
        )

    async def get_session(request: Request) -> Response:
        sid = request.path_params["sid"]
        await gw.registry.get(sid)  # 404 if unknown
        tokens = request.query_params.get("tokens", "").lower() in ("1", "true", "yes")

        def read(reader):
            return reader.session(sid), reader.calls(sid), reader.agents(sid), reader.rewards(sid)

        record, calls, agents, rewards = await gw.store.read(read)
        return _json(_detail(record, calls, agents, rewards, tokens))

    async def list_sessions(request: Request) -> Response:
        group = request.query_params.get("group")
        status = _session_status(request.query_params.get("status"))

        def read(reader):
            return [(s, reader.call_count(s.session_id)) for s in reader.sessions(group_id=group, status=status)]

        rows = await gw.store.read(read)
        return _json(SessionList(sessions=[SessionListItem(**_summary(s), calls=n) for s, n in rows]))

    secret = cursor_secret(gw.config.admin_key)

    async def samples(request: Request) -> Response:
        query = page_query(request.query_params, secret)
        page = await gw.store.read(lambda reader: read_page(reader, query, secret))
        # model_dump_json: floats exact, a non-finite one as a string (orjson would write null)
        return Response(page.model_dump_json(), media_type="application/json")

    async def post_reward(request: Request) -> Response:
        state = await gw.registry.get(request.path_params["sid"])
        req = parse(PostReward, await read_body(request, gw.config.max_body_bytes))
        if req.agent is not None and req.agent not in state.agents:
            raise NotFound(f"session {state.session_id!r} has no agent {req.agent!r}; agents: {sorted(state.agents)}")
        if req.call_id is not None:
            call = await gw.store.read(lambda r: r.call(req.call_id))
            if call is None or call.session_id != state.session_id:
                raise NotFound(f"session {state.session_id!r} has no call {req.call_id!r}")
        await gw.store.add_reward(
            RewardRecord(state.session_id, req.reward, req.agent, req.call_id, req.info, time.time())
        )
        return _json(Ack(ok=True))

    async def post_advantages(request: Request) -> Response:
        state = await gw.registry.get(request.path_params["sid"])
        req = parse(PostAdvantages, await read_body(request, gw.config.max_body_bytes))
        ids = [a.call_id for a in req.advantages]
        calls = await gw.store.read(lambda r: {i: r.call(i) for i in ids})
        records = []
        for item in req.advantages:
            call = calls.get(item.call_id)
            if call is None or call.session_id != state.session_id:
                raise NotFound(f"session {state.session_id!r} has no call {item.call_id!r}")
            if isinstance(item.advantage, list):
                if len(item.advantage) != len(call.sampled_ids):
                    raise InvalidRequest(
                        f"call {item.call_id} sampled {len(call.sampled_ids)} tokens but got "
                        f"{len(item.advantage)} per-token advantages; send one per sampled token or a scalar",
                        param="advantages",
                    )
                records.append(AdvantageRecord(item.call_id, state.session_id, None, item.advantage, time.time()))
            else:
                records.append(AdvantageRecord(item.call_id, state.session_id, item.advantage, None, time.time()))
        await gw.store.set_advantages(records)
        return _json(AdvantagesAck(ok=True, calls=len(records)))

    async def finish_session(request: Request) -> Response:
        state = await gw.registry.get(request.path_params["sid"])
        body = await read_body(request, gw.config.max_body_bytes)
        req = parse(FinishSession, body) if body.strip() else FinishSession()
        await gw.registry.finish(state, req.outcome or EpisodeOutcome.from_info(req.info), req.info)
        await gw.backend.session_finished(state.session_id)
        return _json(SessionSummary(**_summary(state.record)))

    async def pause(request: Request) -> Response:
        body = await read_body(request, gw.config.max_body_bytes)
        req = parse(PauseRequest, body) if body.strip() else PauseRequest()
        gw.gate.pause()
        drained = await gw.gate.drained(req.drain_timeout_s)
        return _json(PauseState(paused=True, drained=drained, in_flight=gw.gate.in_flight))

    async def resume(request: Request) -> Response:
        gw.gate.resume()
        return _json(PauseState(paused=False, in_flight=gw.gate.in_flight))

    async def health(request: Request) -> Response:
        # 503 while the engine is unreachable: calls would fail, so load balancers and
        # supervisors must see it (the gateway itself still answers and keeps its sessions).
        engine = await gw.backend.engine_health()
        up = engine != "unreachable"
        return _json(
            GatewayHealth(
                status="ok" if up else "degraded",
                engine=engine,
                paused=gw.gate.paused,
                backend=gw.config.backend,
                model=gw.served_model,
                in_flight=gw.gate.in_flight,
                admission=await gw.admission_state(),
            ),
            200 if up else 503,
        )

    async def image(request: Request) -> Response:
        sha256 = request.path_params["sha256"].lower()
        if not _SHA256.fullmatch(sha256):
            raise InvalidRequest(
                f"{sha256[:80]!r} is not a sha256 (64 hex digits); use a hash from a call's images", param="sha256"
            )
        found = await gw.store.read(lambda reader: reader.image(sha256))
        if found is None:
            raise NotFound(f"no image with sha256 {sha256} in this gateway's store")
        return Response(
            found.data, media_type=found.media_type, headers={"Cache-Control": "max-age=31536000, immutable"}
        )

    async def metrics(request: Request) -> Response:
        return metrics_response(gw.metrics.registry, request)

    m = gw.metrics

    def admin(endpoint: str, handler):
        return guarded(endpoint, m, admin_only(gw.config.admin_key, handler))

    return [
        Route("/sessions", admin("sessions", create_session), methods=["POST"]),
        Route("/sessions", admin("sessions", list_sessions), methods=["GET"]),
        Route("/sessions/{sid}", admin("session", get_session), methods=["GET"]),
        Route("/samples", admin("samples", samples), methods=["GET"]),
        Route("/sessions/{sid}/reward", admin("reward", post_reward), methods=["POST"]),
        Route("/sessions/{sid}/advantages", admin("advantages", post_advantages), methods=["POST"]),
        Route("/sessions/{sid}/finish", admin("finish", finish_session), methods=["POST"]),
        Route("/admin/pause", admin("pause", pause), methods=["POST"]),
        Route("/admin/resume", admin("resume", resume), methods=["POST"]),
        Route("/images/{sha256}", admin("image", image), methods=["GET"]),
        Route("/health", guarded("health", m, health), methods=["GET"]),
        Route("/metrics", guarded("metrics", m, metrics), methods=["GET"]),
    ]
