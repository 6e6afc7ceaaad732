"""Which session and agent a model call belongs to.

By URL (`/sessions/{sid}/v1`, `/sessions/{sid}/agents/{agent}/v1`, with that session's key),
by a session key on plain `/v1` (bearer or `x-api-key`), or neither (the anonymous session,
if allowed). The agent comes from the path, else the `X-Roost-Agent` header, else `main`;
its parent from `X-Roost-Parent-Agent` the first time the agent calls.
"""

from __future__ import annotations

from starlette.requests import Request

from roost.rollout.gateway.core.auth import session_on_path
from roost.rollout.gateway.core.errors import InvalidSessionKey
from roost.rollout.gateway.core.recording import CallTarget
from roost.rollout.gateway.core.sessions import DEFAULT_AGENT, KEY_PREFIX, SessionRegistry, SessionState, check_agent_id
from roost.rollout.keys import presented_key


async def resolve_session(request: Request, registry: SessionRegistry, sessionless: str) -> SessionState:
    """The session a request's path or key names (the anonymous one if allowed), not yet
    checked to be open."""
    key = presented_key(request.headers)
    if "sid" in request.path_params:
        state = await session_on_path(request, registry)
    elif key is not None and key.startswith(KEY_PREFIX):
        state = await registry.by_key(key)
    elif sessionless == "record":
        state = await registry.anonymous()
    else:
        raise InvalidSessionKey(
            "no session: send the session key from POST /sessions as 'Authorization: Bearer <key>', "
            "or use the session's base_url (/sessions/{id}/v1)"
        )
    return state


async def resolve_target(request: Request, registry: SessionRegistry, sessionless: str) -> CallTarget:
    state = await resolve_session(request, registry, sessionless)
    registry.check_open(state)
    agent = request.path_params.get("agent")
    where = "path"
    if agent is None:
        agent, where = request.headers.get("x-roost-agent") or DEFAULT_AGENT, "X-Roost-Agent"
    check_agent_id(agent, where)
    parent = request.headers.get("x-roost-parent-agent")
    if parent is not None:
        check_agent_id(parent, "X-Roost-Parent-Agent")
    parent = await registry.ensure_agent(state, agent, parent)
    return CallTarget(state, agent, parent)
