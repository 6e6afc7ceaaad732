"""The `local` backend: plain host processes in a private copy of the directory. UNSAFE.

For development only: commands run as the calling user on the host, with the host's network
and filesystem (only the working directory is a private copy). Memory, pids and CPU limits
hold where a cgroup can be created; timeouts and the output cap always hold.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

from .base import SandboxBase, to_result
from .cgroups import LimitGroup
from .config import SandboxConfig
from .errors import SandboxError, SandboxFileNotFound, SandboxUnavailable
from .process import run_process
from .protocol import Capabilities, ExecResult, SandboxSpec
from .stale import sweep, write_owner

ROOT_PREFIX = "roost-local-"
CGROUP_JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


class LocalBackend:
    """Starts LocalSandbox; `capabilities` says plainly what it does not isolate."""

    name = "local"
    capabilities = Capabilities(filesystem_isolated=False, network_isolated=False, limits_enforced=False)

    def __init__(self, config: SandboxConfig):
        self.config = config
        self._swept = False

    async def available(self) -> str | None:
        return None

    async def start(self, spec: SandboxSpec) -> LocalSandbox:
        if spec.image is not None:
            raise SandboxUnavailable(
                f"the local backend cannot start from image {spec.image!r}: it runs on the host. "
                "Use backend 'docker' for images, or pass a directory."
            )
        if not self._swept:
            await asyncio.to_thread(sweep, ROOT_PREFIX)
            self._swept = True
        sandbox = LocalSandbox(self.config, spec)
        try:
            await sandbox.prepare()
        except BaseException:
            await sandbox.close()
            raise
        return sandbox


class LocalSandbox(SandboxBase):
    backend = "local"

    def __init__(self, config: SandboxConfig, spec: SandboxSpec):
        super().__init__(config, spec)
        self.root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX))
        self.workdir = str(self.root / "work")
        self.scratch = self.root / "tmp"
        self.scratch_dir = str(self.scratch)
        self._snapshot_dir = str(self.root / "start.git")
        self.group: LimitGroup | None = None
        self.limits_reason: str | None = None

    async def prepare(self) -> None:
        self.scratch.mkdir()
        if self.spec.directory is not None:
            await copy_tree(self.spec.directory, Path(self.workdir))
        else:
            Path(self.workdir).mkdir()
        limits = self.config.limits
        memory = limits.memory_mb * (1 << 20) if limits.memory_mb else None
        self.group, self.limits_reason = await asyncio.to_thread(
            LimitGroup.create, memory, limits.pids_max, limits.cpus
        )
        self.limits_enforced = self.group is not None
        await asyncio.to_thread(write_owner, self.root, self.group)
        await self.record_start()

    def environment(self, extra: dict[str, str] | None) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.scratch),
            "TMPDIR": str(self.scratch),
            "LANG": "C.UTF-8",
        }
        return env | self.spec.env | (extra or {})

    async def exec(
        self,
        command: str,
        *,
        timeout_s: float | None = None,
        output_limit: int | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        self._check_open()
        timeout_s, output_limit = self._defaults(timeout_s, output_limit)
        argv = [*self.config.shell, command]
        if self.group is not None:
            argv = ["/bin/sh", "-c", CGROUP_JOIN, "sh", *self.group.procs_files(), "--", *argv]
        before = self.group.oom_kills() if self.group else 0
        raw = await run_process(
            argv,
            timeout_s=timeout_s,
            output_limit=output_limit,
            env=self.environment(env),
            cwd=self._host_path(cwd or "."),
            stdin=stdin,
            kill_extra=self.group.kill_all if self.group else None,
        )
        oom = self.group is not None and self.group.oom_kills() > before
        return to_result(raw, oom=oom)

    async def read_file(self, path: str) -> bytes:
        self._check_open()
        target = Path(self._host_path(path))
        try:
            return await asyncio.to_thread(target.read_bytes)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise SandboxFileNotFound(f"{path!r} is not a file in the sandbox ({exc})") from exc

    async def write_file(self, path: str, data: bytes | str) -> None:
        self._check_open()
        target = Path(self._host_path(path))
        payload = data.encode() if isinstance(data, str) else data

        def write() -> None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(payload)

        await asyncio.to_thread(write)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.group is not None:
            await asyncio.to_thread(self.group.remove)
        await asyncio.to_thread(shutil.rmtree, self.root, ignore_errors=True)

    def _host_path(self, path: str) -> str:
        return path if os.path.isabs(path) else os.path.normpath(os.path.join(self.workdir, path))


async def copy_tree(source: Path, target: Path) -> None:
    """A private copy of `source` (reflinks where the filesystem has them)."""
    if not source.is_dir():
        raise SandboxError(f"sandbox source {source} is not a directory; pass a repository folder")
    target.mkdir(parents=True)
    proc = await asyncio.create_subprocess_exec(
        "cp",
        "-a",
        "--reflink=auto",
        f"{source}/.",
        str(target),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise SandboxError(f"copying {source} into the sandbox failed: {err.decode(errors='replace')[-500:]}")
