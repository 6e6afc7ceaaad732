"""SGLang's streaming sessions, from the client's side: which call may send only its new tokens.

SGLang launched with `--enable-streaming-session` holds a session's keys and values between
its requests when each continues the last: `POST /open_session` with `streaming: true`, then
each `/generate` carries `session_params: {"id", "rid": <the previous request>}` and, as
`input_ids`, only the tokens after that request's prompt and output ids (SGLang builds the
prompt so, in `Session.create_req`). A streaming session is append-only and runs one request
at a time. So a call goes in that form only when it surely extends what the engine holds: its
prompt starts with the last finished request's prompt and output ids, nothing of its session is
running, and no call of the session has failed (after one, what the engine holds is not known).
Any other call (a fork or an edit, a concurrent sample, anything after a failure) goes plain:
its whole prompt, no session_params; right, only not held in the session.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

MAX_SESSIONS = 65536


@dataclass
class _Kept:
    """What the client knows of one session on the engine."""

    opened: bool = False
    rid: str | None = None
    """The last finished request."""
    tokens: list[int] = field(default_factory=list)
    """Its prompt and output ids: what the session's next request continues."""
    running: bool = False
    broken: bool = False
    """A call failed or was answered for another prompt: every later call goes plain."""


@dataclass(frozen=True)
class SessionCall:
    """How one model call goes to the engine."""

    input_ids: list[int]
    """What is sent: the whole prompt, or, continuing the session's last request, what follows it."""
    rid: str | None
    session_params: dict[str, str] | None = None
    session: str | None = None
    """The streaming session whose state the call's outcome moves (None: it moves none)."""
    opens: bool = False
    """The session is new to the engine: open it before the call."""


class StreamingSessions:
    """The sessions of one engine, each with its last finished request (at most `max_sessions`:
    past that the least recently used is forgotten, and its calls go plain)."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._max = max_sessions

    def plan(self, session: str, prompt: Sequence[int], rid: str | None) -> SessionCall:
        """How a call of `session` with the whole `prompt` goes; a session call counts as running
        until `finished` or `failed` is told of it."""
        kept = self._kept.get(session)
        if kept is None:
            kept = self._kept[session] = _Kept()
            self._bound()
        self._kept.move_to_end(session)
        if kept.running or kept.broken:
            return SessionCall(list(prompt), rid)
        last, known = kept.rid, len(kept.tokens)
        # at least one new token: SGLang reads the first of the appended ones
        continues = last is not None and len(prompt) > known and list(prompt[:known]) == kept.tokens
        if kept.opened and not continues:
            return SessionCall(list(prompt), rid)
        kept.running = True
        rid = rid or uuid.uuid4().hex
        if last is None or not continues:  # the session's first call
            return SessionCall(list(prompt), rid, {"id": session}, session, opens=True)
        return SessionCall(list(prompt[known:]), rid, {"id": session, "rid": last}, session)

    def opened(self, call: SessionCall) -> None:
        kept = self._of(call)
        if kept is not None:
            kept.opened = True

    def finished(self, call: SessionCall, prompt: Sequence[int], output_ids: Sequence[int], prompt_tokens: int) -> bool:
        """`call` of the whole `prompt` was answered; False when the engine ran another prompt
        (`prompt_tokens` differs: its answer must not be used, and the session is given up)."""
        kept = self._of(call)
        if kept is None:
            return True
        kept.running = False
        if prompt_tokens != len(prompt):
            kept.broken = True
            return False
        kept.rid, kept.tokens = call.rid, list(prompt) + list(output_ids)
        return True

    def failed(self, call: SessionCall) -> None:
        """`call` failed or was aborted: what its session holds on the engine is no longer known."""
        kept = self._of(call)
        if kept is not None:
            kept.running, kept.broken = False, True

    def forget(self, session: str) -> bool:
        """Forget `session`; whether the engine had it open."""
        kept = self._kept.pop(session, None)
        return kept is not None and kept.opened

    def _of(self, call: SessionCall) -> _Kept | None:
        return self._kept.get(call.session) if call.session is not None else None

    def _bound(self) -> None:
        while len(self._kept) > self._max:
            self._kept.popitem(last=False)
