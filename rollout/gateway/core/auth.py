"""Who may call what on the gateway.

A session's paths (`/sessions/{sid}/v1/...`, `/sessions/{sid}/agents/{agent}/v1/...` and the
probes under them) take that session's key; the control plane and trajectory reads take the
admin key. `/health`, `/metrics` (counters only) and plain `/v1` are open: plain `/v1` records
into the session whose key it carries, else follows `sessionless`. Rewards, advantages and
finishing are admin-only, not the session key's: the harness holds its session's key and must
not be able to score its own episode.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from roost.rollout.gateway.core.errors import InvalidAdminKey, InvalidSessionKey
from roost.rollout.gateway.core.http_util import Handler
from roost.rollout.gateway.core.sessions import SessionRegistry, SessionState
from roost.rollout.gateway.gateway import Gateway
from roost.rollout.keys import presented_key, same_key


def admin_only(admin_key: str, handler: Handler) -> Handler:
    async def run(request: Request) -> Response:
        if not same_key(presented_key(request.headers), admin_key):
            raise InvalidAdminKey(
                f"{request.method} {request.url.path} needs the gateway's admin key as 'Authorization: Bearer <key>' "
                "(or 'x-api-key'); it is the key given as --admin-key or ROOST_ADMIN_KEY, or the one "
                "`roost gateway` printed at start"
            )
        return await handler(request)

    return run


async def session_on_path(request: Request, registry: SessionRegistry) -> SessionState:
    """The session a path names, once the request shows that session's key."""
    sid = request.path_params["sid"]
    key = presented_key(request.headers)
    if key is None:
        raise InvalidSessionKey(
            f"session {sid!r} takes its key on its paths: send the key POST /sessions returned as "
            "'Authorization: Bearer <key>' or 'x-api-key' (an OpenAI or Anthropic client's api_key)"
        )
    state = await registry.get(sid)
    registry.check_key(state, key)
    return state


def session_keyed(gw: Gateway, handler: Handler) -> Handler:
    """`handler` on a route that may sit under a session's path: there, the session's key is
    checked first (the gateway's registry exists once it has started)."""

    async def run(request: Request) -> Response:
        if "sid" in request.path_params:
            await session_on_path(request, gw.registry)
        return await handler(request)

    return run
