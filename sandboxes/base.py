"""What every backend's sandbox shares: defaults, the start record, diff, result building."""

from __future__ import annotations

from .config import SandboxConfig
from .errors import SandboxClosed, SandboxError
from .process import RawResult
from .protocol import ExecResult, Outcome, SandboxSpec
from .snapshot import check_diff, diff_script, parse_start, start_script

SNAPSHOT_DIR = "/tmp/.roost-start.git"


class SandboxBase:
    """Common part of the three sandboxes; a subclass provides `exec` and the file calls."""

    backend = "base"
    workdir = "/"
    scratch_dir = "/tmp"
    limits_enforced = False
    """Whether this sandbox's memory, pids and CPU limits are enforced (cgroups or runtime)."""

    def __init__(self, config: SandboxConfig, spec: SandboxSpec):
        self.config = config
        self.spec = spec
        self.closed = False
        self._start_record: str | None = None
        self._start_error: SandboxError | None = None
        self._snapshot_dir = SNAPSHOT_DIR

    async def exec(
        self,
        command: str,
        *,
        timeout_s: float | None = None,
        output_limit: int | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        raise NotImplementedError

    async def record_start(self) -> None:
        """Remember the working directory's state; `diff()` is relative to it.

        Without git in the sandbox everything but `diff()` still works: the error is kept
        and raised by `diff()`.
        """
        result = await self.exec(start_script(self._snapshot_dir), timeout_s=max(self.config.timeout_s, 300))
        try:
            self._start_record = parse_start(result)
        except SandboxError as exc:
            self._start_error = exc

    async def diff(self) -> str:
        self._check_open()
        if self._start_record is None:
            raise self._start_error or SandboxError("diff() before the sandbox recorded its start state")
        result = await self.exec(
            diff_script(self._start_record, self._snapshot_dir),
            timeout_s=max(self.config.timeout_s, 300),
            output_limit=max(self.config.output_limit_bytes, 64 << 20),
        )
        return check_diff(result)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        raise NotImplementedError

    def _check_open(self) -> None:
        if self.closed:
            raise SandboxClosed(f"this {self.backend} sandbox is closed; start a new one for another episode")

    def _defaults(self, timeout_s: float | None, output_limit: int | None) -> tuple[float, int]:
        return (
            timeout_s if timeout_s is not None else self.config.timeout_s,
            output_limit if output_limit is not None else self.config.output_limit_bytes,
        )


def to_result(raw: RawResult, *, oom: bool) -> ExecResult:
    """An ExecResult from a host process's result; `oom` from the sandbox's OOM counter."""
    if raw.timed_out:
        outcome = Outcome.timeout
    elif raw.overflowed:
        outcome = Outcome.output_limit
    elif oom:
        outcome = Outcome.oom_killed
    else:
        outcome = Outcome.exited
    code = raw.returncode
    if code is not None and code < 0:
        code = 128 - code  # killed by a signal: report it the way a shell does
    return ExecResult(
        raw.output.decode("utf-8", errors="replace"), code, outcome, raw.duration_s, truncated=raw.overflowed
    )
