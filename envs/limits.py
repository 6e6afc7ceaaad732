"""Refuse request bodies over a size limit with 413, before any route parses them."""

from __future__ import annotations

import json

from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from roost.serving.body import BodyOverLimit, read_limited


class BodySizeLimit:
    """ASGI middleware: buffers the body (up to `max_bytes`) and replays it to the app."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            body = await read_limited(Request(scope, receive), self.max_bytes)
        except BodyOverLimit:
            await self._refuse(send)
            return
        except ClientDisconnect:
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(
            {"error": {"type": "bad_request", "message": f"request body is over the {self.max_bytes}-byte limit"}}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})
