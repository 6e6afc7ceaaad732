"""Sandbox configuration: which backend, the limits every episode gets, backend options."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

BackendName = Literal["auto", "docker", "bubblewrap", "local"]


class SandboxLimits(BaseModel):
    """Resource limits of one sandbox; None lifts a limit."""

    model_config = ConfigDict(extra="forbid")

    memory_mb: int | None = Field(4096, gt=0)
    """Memory (RAM, no swap) for everything the sandbox runs; past it the kernel OOM-kills."""
    pids_max: int | None = Field(1024, gt=0)
    """Most processes and threads alive at once: a fork bomb stops here."""
    cpus: float | None = Field(2.0, gt=0)
    """CPU time as a number of cores."""
    network: bool = False
    """Allow network access (docker: the default bridge; bubblewrap: the host's network)."""


class DockerOptions(BaseModel):
    """Options of the docker backend."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = None
    """Docker engine address; None reads DOCKER_HOST (then the default socket)."""
    default_image: str | None = None
    """Image for sandboxes whose spec names none; None reads ROOST_BASE_IMAGE."""
    init: bool = True
    """Run the engine's init (tini) as PID 1 so orphans are reaped (no zombie build-up)."""
    ping_timeout_s: float = 3.0
    """How long `available()` waits for the engine to answer."""


class BubblewrapOptions(BaseModel):
    """Options of the bubblewrap backend."""

    model_config = ConfigDict(extra="forbid")

    ro_binds: list[str] = []
    """Extra host paths made visible read-only at the same place (e.g. a Python prefix)."""
    path_prepend: list[str] = []
    """Folders put in front of PATH inside the sandbox (e.g. a venv's bin)."""
    fresh_repo: Literal["auto", "overlay", "copy"] = "auto"
    """How the repository is made private: an overlayfs mount (copy-on-write, instant) or a
    copy; 'auto' uses the overlay where the kernel allows it."""


class SandboxConfig(BaseModel):
    """Everything that is the same for every episode's sandbox."""

    model_config = ConfigDict(extra="forbid")

    backend: BackendName = "auto"
    """'auto' picks docker where an engine answers, else bubblewrap; never local."""
    limits: SandboxLimits = SandboxLimits()
    timeout_s: float = Field(60.0, gt=0)
    """Default time limit of one command."""
    output_limit_bytes: int = Field(1 << 20, gt=0)
    """Default output cap of one command; past it the command is killed."""
    shell: list[str] = ["/bin/bash", "-c"]
    """How a command string is run."""
    docker: DockerOptions = DockerOptions()
    bubblewrap: BubblewrapOptions = BubblewrapOptions()
