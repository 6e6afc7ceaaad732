"""What serves the model calls of every wire, and what a wire's front-end gives it.

Two backends implement `Backend`: the token engine (`call_pipeline.TokenBackend`: embedded
or SGLang, token-exact) and the OpenAI pass-through (`passthrough.PassthroughBackend`). A
route parses its wire's request, resolves the call's target and hands both, with the wire's
`Front`, to the gateway's backend; it never asks which backend that is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from starlette.responses import Response
from starlette.types import Receive

from roost.rollout.gateway.core.recording import CallTarget

if TYPE_CHECKING:
    from roost.rollout.chat.reply_parser import ReplyEvent
    from roost.rollout.gateway.core.call_pipeline import Outcome, Prepared
    from roost.rollout.gateway.core.engine_context import EngineContext
    from roost.rollout.gateway.core.errors import GatewayError


class Streamer(Protocol):
    """One streamed answer in a wire's own framing."""

    def opening(self) -> list[bytes]:
        """Frames sent before the first token."""

    def event(self, event: ReplyEvent, tool_id: str | None) -> list[bytes]:
        """Frames for a piece of the reply (`tool_id`: the id given to a tool call)."""

    def closing(self, outcome: Outcome) -> list[bytes]:
        """Frames sent once the call is recorded."""

    def failure(self, error: GatewayError) -> bytes:
        """The frame reporting a failure after the headers went out."""


class Front(Protocol):
    """A wire's front-end: it parses its request into a planned call and formats answers."""

    endpoint: str
    """The name calls of this wire are recorded and counted under."""
    passthrough_path: str | None
    """The upstream path a pass-through backend forwards this wire to; None: not forwardable."""

    async def prepare(
        self, ctx: EngineContext, target: CallTarget, req: Any, raw_body: bytes, received: float
    ) -> Prepared:
        """Check the request and plan its prompt on the target agent's token tree."""

    def tool_id(self) -> str:
        """A fresh id for a tool call in this wire's style."""

    def record_response(self, p: Prepared, outcome: Outcome) -> dict[str, Any]:
        """The reply as stored with the call, for people."""

    def answer(self, ctx: EngineContext, p: Prepared, outcomes: list[Outcome]) -> dict[str, Any]:
        """The body of a non-streamed answer."""

    def streamer(self, ctx: EngineContext, p: Prepared, call_id: str, weight_version: str) -> Streamer:
        """The framing of a streamed answer."""

    def key_messages(self, req: Any) -> tuple[list | None, list | None]:
        """The request's messages and tools as template dicts (None for a raw prompt), for the
        keys a pass-through backend records."""


class Counting(Front, Protocol):
    """A front-end that can count a request's prompt tokens without calling the model."""

    async def count(self, ctx: EngineContext, target: CallTarget, req: Any, raw_body: bytes) -> int:
        """The prompt tokens the request would send the engine (planned on the agent's tree)."""


class Backend(Protocol):
    """Serves model calls; each call is recorded before its answer is returned."""

    served_model: str

    async def call(
        self, front: Front, target: CallTarget, req: Any, raw_body: bytes, received: float, receive: Receive
    ) -> Response:
        """Serve one call of `front`'s wire (`req`: its parsed request; `stream` comes from it)."""

    async def count_tokens(self, front: Counting, target: CallTarget, req: Any, raw_body: bytes) -> int:
        """The prompt tokens `req` would take, without calling the model or recording anything."""

    async def model_cards(self) -> list[dict[str, Any]]:
        """The served models as OpenAI model cards."""

    async def models(self) -> Response:
        """`GET /v1/models`."""

    async def engine_health(self) -> str:
        """`ok`, `unreachable`, or `n/a` where the backend has no engine of its own to ask."""

    async def session_finished(self, session_id: str) -> None:
        """The session is over: its engine may drop what it kept for it."""

    async def close(self) -> None:
        """Release connections and threads."""
