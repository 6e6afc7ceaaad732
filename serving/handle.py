"""What a launcher of a roost server hands back, whichever way the server runs (a subprocess,
a thread of this process, a supervised subprocess in a Ray actor)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


class ServerStartError(RuntimeError):
    """A server exited, or never reported its port or answered /health, while starting."""


@runtime_checkable
class ServerHandle(Protocol):
    """A server started by `start()` (which returns its URL once `/health` answers) and stopped
    by `stop()`; as a context manager, `with handle as url:` does both."""

    @property
    def url(self) -> str:
        """Its base URL, with the port it bound (known once started)."""
        ...

    def start(self) -> str: ...

    def stop(self) -> None: ...

    def healthy(self) -> bool: ...

    def __enter__(self) -> str: ...

    def __exit__(self, *exc: object) -> None: ...


def is_healthy(url: str) -> bool:
    import httpx  # here: env images serve without it

    try:
        return httpx.get(f"{url}/health", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False
