"""Stopping work whose HTTP client has gone away.

A non-streamed request's handler waits for its answer with no write to fail on, so nothing
tells it that the client closed the connection: the engine would go on generating for
nobody. `cancelled_on_hangup` listens for the ASGI disconnect message while the handler
waits, cancels the wait when it comes and raises `ClientGone` instead. (Streamed answers
need none of this: Starlette cancels a stream whose client disconnects.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.types import Receive


class ClientGone(Exception):
    """The HTTP client disconnected before its answer was ready."""


@asynccontextmanager
async def cancelled_on_hangup(receive: Receive) -> AsyncIterator[None]:
    """Run the block until the client disconnects; then cancel it and raise `ClientGone`.

    Only for a request whose body has been read in full: the only message left to receive
    is then the disconnect.
    """
    task = asyncio.current_task()
    gone = False

    async def watch() -> None:
        nonlocal gone
        while (await receive())["type"] != "http.disconnect":
            pass
        gone = True
        task.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        yield
    except asyncio.CancelledError:
        if not gone:
            raise
        task.uncancel()  # the cancellation was ours, and is answered by ClientGone
        raise ClientGone() from None
    finally:
        watcher.cancel()
