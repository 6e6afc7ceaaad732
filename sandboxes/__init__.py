"""Isolated command execution for environments: one `Sandbox` per episode.

Three backends share one protocol (`roost.sandboxes.protocol`): `docker` (one long-lived
container per episode), `bubblewrap` (no root needed; a copy-on-write overlay of the
repository per episode) and `local` (development only: no isolation). Start one with
`start_sandbox(config, spec)`; nothing here runs or imports a backend until asked.
Where it sits: docs/architecture.md; the backends: docs/sandboxes.md.
"""

from .config import BubblewrapOptions, DockerOptions, SandboxConfig, SandboxLimits
from .errors import SandboxError, SandboxFileNotFound, SandboxUnavailable
from .protocol import ExecResult, Outcome, Sandbox, SandboxBackend, SandboxSpec
from .registry import BACKENDS, make_backend, start_sandbox

__all__ = [
    "BACKENDS",
    "BubblewrapOptions",
    "DockerOptions",
    "ExecResult",
    "Outcome",
    "Sandbox",
    "SandboxBackend",
    "SandboxConfig",
    "SandboxError",
    "SandboxFileNotFound",
    "SandboxLimits",
    "SandboxSpec",
    "SandboxUnavailable",
    "make_backend",
    "start_sandbox",
]
