"""The sandbox contract every backend fulfils, and the records it returns.

Invariants (checked for every backend by tests/sandboxes/test_contract.py):
- `exec` always returns: a command that outlives its timeout or prints past its output cap
  is killed with everything it started, and the result says which (`Outcome`).
- Writes land in the sandbox only: never in the source directory, the host, or the next
  sandbox started from the same source.
- `diff()` is the change of the working directory since the sandbox started, as a git patch
  that `git apply` takes in a fresh sandbox of the same source.
- `close()` frees everything (container, overlay, cgroup) and may be called twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Protocol, runtime_checkable


class Outcome(str, Enum):
    """How a command ended."""

    exited = "exited"
    """It exited by itself (any exit code, including death by a signal it did not get from roost)."""
    timeout = "timeout"
    """It ran past its timeout and was killed with all its children."""
    output_limit = "output_limit"
    """It printed more than the output cap and was killed; the output is the first cap bytes."""
    oom_killed = "oom_killed"
    """The kernel's OOM killer ended it (or one of its children) at the sandbox's memory limit."""


@dataclass(frozen=True)
class ExecResult:
    """The result of one command: its merged stdout and stderr and how it ended."""

    output: str
    """stdout and stderr interleaved as written, decoded as UTF-8 (bad bytes replaced)."""
    exit_code: int | None
    """The shell's exit status; None when roost killed the command (timeout, output cap)."""
    outcome: Outcome
    duration_s: float
    truncated: bool = False
    """True when output stopped at the output cap."""

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.exited and self.exit_code == 0


@dataclass(frozen=True)
class SandboxSpec:
    """What one episode's sandbox starts from."""

    image: str | None = None
    """docker: an image name. bubblewrap: an unpacked root filesystem folder used as `/`
    (default: the host's system folders, read-only). local: not supported."""
    directory: Path | None = None
    """A folder (usually a git repository) that appears, copy-on-write, at `workdir`."""
    workdir: str = "/testbed"
    """Where commands run. The local backend cannot place it and reports its real path."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables for every command of this sandbox."""


@dataclass(frozen=True)
class Capabilities:
    """What a backend enforces; the contract tests skip what a backend declares it lacks."""

    filesystem_isolated: bool
    """Writes outside the working directory cannot reach the host."""
    network_isolated: bool
    """No network unless the config allows it."""
    limits_enforced: bool
    """Memory, pids and CPU limits hold (cgroups or the container runtime)."""


@runtime_checkable
class Sandbox(Protocol):
    """One episode's isolated machine: run commands, move files, diff, close."""

    backend: str
    workdir: str
    """The working directory as commands see it."""
    scratch_dir: str
    """A writable folder outside `workdir`, private to this sandbox, kept between commands."""

    async def exec(
        self,
        command: str,
        *,
        timeout_s: float | None = None,
        output_limit: int | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Run `command` with the configured shell; defaults come from the SandboxConfig."""
        ...

    async def read_file(self, path: str) -> bytes:
        """Bytes of `path` (relative paths are under `workdir`); SandboxFileNotFound if absent."""
        ...

    async def write_file(self, path: str, data: bytes | str) -> None:
        """Create or replace `path` (and its parent folders)."""
        ...

    async def diff(self) -> str:
        """The working directory's change since start as a git patch ('' when unchanged)."""
        ...

    async def record_start(self) -> None:
        """Make the current state the one `diff()` compares against (start() already did, once)."""
        ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Sandbox: ...

    async def __aexit__(self, *exc: object) -> None: ...


class SandboxBackend(Protocol):
    """Starts sandboxes of one kind; one per config, reused across episodes."""

    name: str
    capabilities: Capabilities

    async def available(self) -> str | None:
        """None when this backend can start sandboxes here, else why not (and how to fix it)."""
        ...

    async def start(self, spec: SandboxSpec) -> Sandbox: ...
