"""Which gateway worker a request goes to (pure: the relay does the I/O)."""

from __future__ import annotations

import re
import uuid
import zlib
from dataclasses import dataclass
from typing import Literal

import orjson

from roost.rollout.gateway.core.sessions import KEY_PREFIX

ANONYMOUS_PREFIX = "anon-"
"""The anonymous session's ids (sessionless `record`): it lives on worker 0."""

_SESSION_PATH = re.compile(r"^/sessions/([^/]+)(?:/|$)")

BROADCAST = frozenset(
    {
        ("POST", "/admin/pause"),
        ("POST", "/admin/resume"),
        ("POST", "/admin/weight_version"),
        ("POST", "/admin/engines"),
    }
)
"""Control writes that every worker must apply (each has its own engine router and pause gate)."""

MERGED = frozenset({("GET", "/health"), ("GET", "/metrics")})
STORE_READS = frozenset({("GET", "/samples"), ("GET", "/sessions")})
"""Answered from the store alone: any worker will do."""

Kind = Literal["session", "create", "key", "broadcast", "merged", "any", "first"]


@dataclass(frozen=True)
class Destination:
    kind: Kind
    """session: the worker of `session_id`; create: POST /sessions; key: the worker of the session
    the request's key names; broadcast: every worker; merged: every worker, answers merged; any: one
    worker, taken in turn; first: worker 0 (the anonymous session, probes, the OpenAPI document)."""
    session_id: str | None = None


def worker_of(session_id: str, workers: int) -> int:
    """The worker a session lives on: the same for the same id and worker count, in every process."""
    if session_id.startswith(ANONYMOUS_PREFIX):
        return 0
    return zlib.crc32(session_id.encode()) % workers


def destination(method: str, path: str, key: str | None) -> Destination:
    """Where a request with this method, path and presented key goes."""
    if (method, path) in BROADCAST or (method == "DELETE" and path.startswith("/admin/engines/")):
        return Destination("broadcast")
    if (method, path) in MERGED:
        return Destination("merged")
    if method == "POST" and path in ("/sessions", "/sessions/"):
        return Destination("create")
    if (method, path) in STORE_READS:
        return Destination("any")
    found = _SESSION_PATH.match(path)
    if found:
        return Destination("session", found.group(1))
    if key is not None and key.startswith(KEY_PREFIX):
        return Destination("key")
    return Destination("first")


def with_session_id(body: bytes) -> tuple[bytes, str | None]:
    """The `POST /sessions` body with a `session_id` (a new one where it names none) and that id;
    (body, None) unchanged where it is not a JSON object or its id is not a string, for a worker
    to refuse with its own 400."""
    try:
        request = orjson.loads(body) if body.strip() else {}
    except orjson.JSONDecodeError:
        return body, None
    if not isinstance(request, dict):
        return body, None
    sid = request.get("session_id")
    if sid is None:
        sid = uuid.uuid4().hex
        request["session_id"] = sid
        return orjson.dumps(request), sid
    return (body, sid) if isinstance(sid, str) and sid else (body, None)
