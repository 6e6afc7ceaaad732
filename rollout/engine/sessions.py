"""SGLang's session requests on the embedded engine: which stored request a call continues.

A call whose `session_params` name a finished request of an open session (`rid`) sends only
the tokens that follow it: its prompt is that request's prompt and output ids, then its own
`input_ids`, a leading BOS dropped (SGLang's `Session.create_req`, with its `offset` and
`drop_previous_output`). A
session keeps its last finished request alone, which is all a streaming session (SGLang's
append-only kind) ever continues, so what it holds is one prompt and reply, freed by
`/close_session` or by its `timeout`. Only what SGLang would abort is refused (a 400 that says
why): an unknown session or rid, a rid still running, and in a streaming session a second
request while one runs, `offset` or `drop_previous_output`. `replace` (a branch cut off) is
not implemented. A call naming its session's `id` alone sends its whole prompt, open session
or not: that is how roost's gateway names a program's calls for the slot cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from roost.rollout.engine_api.wire import OpenSessionRequest, RequestError, SessionParams

MAX_OPEN_SESSIONS = 65536


@dataclass
class _Open:
    """An open session: its last finished request, and the ones running now."""

    streaming: bool
    timeout_s: float | None
    touched: float
    last_rid: str | None = None
    tokens: list[int] = field(default_factory=list)
    """The last finished request's prompt and output ids."""
    prompt_len: int = 0
    """How many of `tokens` were its prompt."""
    running: set[str] = field(default_factory=set)

    def timed_out(self, now: float) -> bool:
        return self.timeout_s is not None and not self.running and now - self.touched > self.timeout_s


@dataclass(frozen=True)
class Turn:
    """One request as its session sees it: `prompt` is the whole prompt the engine runs."""

    rid: str
    prompt: list[int]
    session: str | None = None
    """The open session whose last request this one becomes when it finishes (None: none)."""


@dataclass
class SessionCounts:
    """For `/metrics`: the requests that continued a stored one, and their tokens."""

    continued_requests: int = 0
    sent_tokens: int = 0
    """Tokens those requests sent (the rest of their prompts came from the request they continued)."""
    continued_tokens: int = 0


class SessionTable:
    def __init__(self, bos_token_id: int | None, clock: Callable[[], float] = time.monotonic) -> None:
        """`bos_token_id`: dropped from the start of a continuing request's tokens, as SGLang does."""
        self._bos = bos_token_id
        self._open: dict[str, _Open] = {}
        self._clock = clock
        self.counts = SessionCounts()

    @property
    def open_sessions(self) -> int:
        return len(self._open)

    def open(self, req: OpenSessionRequest, new_id: str) -> str:
        """Open `req.session_id` (or `new_id`); refused when it is open already, as SGLang does."""
        self._drop_timed_out()
        session = req.session_id or new_id
        if session in self._open:
            raise RequestError(
                f"session {session!r} is already open: close it first (POST /close_session) or open another id"
            )
        if len(self._open) >= MAX_OPEN_SESSIONS:
            raise RequestError(f"{MAX_OPEN_SESSIONS} sessions are open: close finished ones first", 429)
        self._open[session] = _Open(bool(req.streaming), req.timeout, self._clock())
        return session

    def close(self, session: str) -> None:
        self._open.pop(session, None)

    def begin(self, params: SessionParams | None, input_ids: Sequence[int], rid: str) -> Turn:
        """The whole prompt of a request that sent `input_ids`; raises RequestError for what SGLang
        would abort. A request of an open session counts as running until `end`."""
        if params is None:
            return Turn(rid, list(input_ids))
        state = self._live(params.id)
        if state is None:
            if params.rid or params.offset or params.drop_previous_output or params.replace:
                raise RequestError(
                    f"Invalid request session id: session {params.id!r} is not open; open it with POST "
                    "/open_session before continuing its requests by session_params.rid"
                )
            return Turn(rid, list(input_ids))
        prompt = self._prompt(params, state, input_ids)
        state.running.add(rid)
        state.touched = self._clock()
        return Turn(rid, prompt, params.id)

    def end(self, turn: Turn, output_ids: Sequence[int] | None) -> None:
        """`turn` is over; `output_ids`: it finished with these (None: aborted or failed, and the
        session's last request stays the one before, as in SGLang)."""
        state = self._open.get(turn.session) if turn.session is not None else None
        if state is None:
            return
        state.running.discard(turn.rid)
        state.touched = self._clock()
        if output_ids is not None:
            state.last_rid, state.tokens, state.prompt_len = turn.rid, turn.prompt + list(output_ids), len(turn.prompt)

    def _prompt(self, params: SessionParams, state: _Open, input_ids: Sequence[int]) -> list[int]:
        self._check(params, state)
        if params.rid is None:
            return list(input_ids)
        kept = state.tokens[: state.prompt_len] if params.drop_previous_output else state.tokens
        if params.offset:
            kept = kept[: params.offset]
        self.counts.continued_requests += 1
        self.counts.sent_tokens += len(input_ids)
        self.counts.continued_tokens += len(kept)
        skip = 1 if self._bos is not None and input_ids and input_ids[0] == self._bos else 0
        return kept + list(input_ids[skip:])

    def _check(self, params: SessionParams, state: _Open) -> None:
        where = f"session {params.id!r}"
        if params.replace:
            raise RequestError(
                "session_params.replace is not supported by the embedded engine: it keeps a session's last "
                "request alone, so continue that one (session_params.rid) or send the whole prompt"
            )
        if state.streaming and state.running:
            raise RequestError(
                f"Streaming session already has an active request: {where} runs {sorted(state.running)[0]!r}; "
                "send the next request when it has finished"
            )
        if state.streaming and (params.offset or params.drop_previous_output):
            name = "offset" if params.offset else "drop_previous_output"
            raise RequestError(f"Streaming sessions do not support {name}: {where} is append-only")
        if params.rid is None and state.streaming and state.last_rid is not None:
            raise RequestError(
                f"{where} has a finished request ({state.last_rid!r}): name it in session_params.rid and send "
                "only the tokens that follow it (the embedded engine does not guess which request is continued)"
            )
        if params.rid is not None and params.rid in state.running:
            raise RequestError(
                f"Session request is appending to a request that hasn't finished: {params.rid!r} of {where} "
                "is running; wait for its answer"
            )
        if params.rid is not None and params.rid != state.last_rid:
            raise RequestError(
                f"Invalid request session id: {params.rid!r} is not the last finished request of {where} "
                f"({state.last_rid!r}); the embedded engine keeps only that one"
            )

    def _live(self, session: str) -> _Open | None:
        """The open session `session`, None once its timeout has passed (then it is closed)."""
        state = self._open.get(session)
        if state is not None and state.timed_out(self._clock()):
            del self._open[session]
            return None
        return state

    def _drop_timed_out(self) -> None:
        now = self._clock()
        for session in [s for s, o in self._open.items() if o.timed_out(now)]:
            del self._open[session]
