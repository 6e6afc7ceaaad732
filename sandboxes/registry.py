"""Backend short names → classes (by dotted path, imported on first use), and `start_sandbox`."""

from __future__ import annotations

import importlib

from .config import SandboxConfig
from .errors import SandboxUnavailable
from .protocol import Sandbox, SandboxBackend, SandboxSpec

BACKENDS: dict[str, str] = {
    "docker": "roost.sandboxes.docker_sandbox:DockerBackend",
    "bubblewrap": "roost.sandboxes.bwrap_sandbox:BubblewrapBackend",
    "local": "roost.sandboxes.local_sandbox:LocalBackend",
}
AUTO_ORDER = ("docker", "bubblewrap")


def backend_class(name: str) -> type:
    if name not in BACKENDS:
        raise SandboxUnavailable(f"unknown sandbox backend {name!r}; expected one of {sorted(BACKENDS)}")
    module, _, attr = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


async def make_backend(config: SandboxConfig) -> SandboxBackend:
    """The configured backend; for 'auto' the first of docker, bubblewrap that is available."""
    if config.backend != "auto":
        return backend_class(config.backend)(config)
    reasons = []
    for name in AUTO_ORDER:
        backend = backend_class(name)(config)
        reason = await backend.available()
        if reason is None:
            return backend
        reasons.append(f"{name}: {reason}")
    raise SandboxUnavailable(
        "no sandbox backend is available (" + "; ".join(reasons) + "). Start a Docker engine or install "
        "bubblewrap; backend='local' runs without isolation, for development only."
    )


async def start_sandbox(config: SandboxConfig, spec: SandboxSpec) -> Sandbox:
    """One sandbox from a config; use it as `async with await start_sandbox(...) as sb:`."""
    backend = await make_backend(config)
    return await backend.start(spec)
