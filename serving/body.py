"""Reading a request body within a size limit, for every roost server; each answers the refusal
in its own error shape."""

from __future__ import annotations

from starlette.requests import Request


class BodyOverLimit(Exception):
    """The body passes `limit` bytes: by its Content-Length (`declared`, as the header said it)
    or, with no such header (chunked), while it arrived (`declared` None)."""

    def __init__(self, limit: int, declared: str | None) -> None:
        super().__init__(f"request body {f'of {declared} bytes ' if declared else ''}exceeds the {limit}-byte limit")
        self.limit = limit
        self.declared = declared


async def read_limited(request: Request, limit: int) -> bytes:
    """The body, refused (`BodyOverLimit`) as soon as it is known to pass `limit` bytes: by its
    Content-Length, else while it arrives, so an endless body is never held. A client that hangs
    up raises starlette's `ClientDisconnect`."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise BodyOverLimit(limit, length)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyOverLimit(limit, None)
        chunks.append(chunk)
    return b"".join(chunks)
