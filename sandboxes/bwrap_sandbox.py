"""The `bubblewrap` backend: each command in fresh namespaces, no root needed.

A sandbox is a folder on the host: the repository's copy-on-write upper layer (or a copy),
a private /tmp, and a cgroup for its limits where the machine offers one. Each command runs
as `bwrap` with every namespace unshared (no network unless allowed), all capabilities
dropped, the system folders read-only, and only the working directory and /tmp writable.
Killing the command's process group ends bwrap, whose PID namespace takes every process of
the command with it; the cgroup kill is the second net.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import tempfile
from pathlib import Path

from .base import SandboxBase, to_result
from .cgroups import LimitGroup
from .config import SandboxConfig
from .errors import SandboxError, SandboxFileNotFound, SandboxUnavailable
from .local_sandbox import CGROUP_JOIN, copy_tree
from .overlay import Overlay, mountable, overlay_works, remove_tree
from .process import run_process
from .protocol import Capabilities, ExecResult, SandboxSpec
from .stale import sweep, write_owner

SYSTEM_DIRS = ("/usr", "/etc", "/opt")
ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MISSING_EXIT = 44
MAX_FILE_BYTES = 256 << 20
ROOT_PREFIX = "roost-bwrap-"


class BubblewrapBackend:
    """Starts BubblewrapSandbox; probes bwrap and the overlay mount once per backend."""

    name = "bubblewrap"
    capabilities = Capabilities(filesystem_isolated=True, network_isolated=True, limits_enforced=True)

    def __init__(self, config: SandboxConfig):
        self.config = config
        self._unavailable: str | None = None
        self._probed = False
        self.use_overlay = False

    async def available(self) -> str | None:
        if not self._probed:
            self._unavailable, self.use_overlay = await self._probe()
            self._probed = True
        return self._unavailable

    async def _probe(self) -> tuple[str | None, bool]:
        if shutil.which("bwrap") is None:
            return "bwrap is not installed; install it with `apt-get install bubblewrap`", False
        await asyncio.to_thread(sweep, ROOT_PREFIX)
        mode = self.config.bubblewrap.fresh_repo
        if mode == "copy":
            return None, False
        reason = await overlay_works()
        if reason is not None and mode == "overlay":
            return f"fresh_repo='overlay' but {reason}; use fresh_repo='copy' or 'auto'", False
        return None, reason is None

    async def start(self, spec: SandboxSpec) -> BubblewrapSandbox:
        reason = await self.available()
        if reason is not None:
            raise SandboxUnavailable(f"the bubblewrap backend cannot run here: {reason}")
        if spec.image is not None and not Path(spec.image).is_dir():
            raise SandboxUnavailable(
                f"bubblewrap takes an unpacked root filesystem folder as its image, not {spec.image!r}; "
                "unpack one (`docker export`) or use backend 'docker'."
            )
        sandbox = BubblewrapSandbox(self.config, spec)
        try:
            await sandbox.prepare(self.use_overlay)
        except BaseException:
            await sandbox.close()
            raise
        return sandbox


class BubblewrapSandbox(SandboxBase):
    backend = "bubblewrap"

    def __init__(self, config: SandboxConfig, spec: SandboxSpec):
        super().__init__(config, spec)
        self.workdir = spec.workdir
        self.root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX))
        self.scratch = self.root / "tmp"
        self.repo = self.root / "repo"
        self.overlay: Overlay | None = None
        self.group: LimitGroup | None = None
        self.limits_reason: str | None = None

    async def prepare(self, use_overlay: bool) -> None:
        self.scratch.mkdir()
        source = self.spec.directory
        if source is not None and not source.is_dir():
            raise SandboxError(f"sandbox source {source} is not a directory; pass a repository folder")
        if source is not None and use_overlay and mountable(source.resolve()):
            self.overlay = Overlay.under(source.resolve(), self.root)
        elif source is not None:
            await copy_tree(source, self.repo)
        else:
            self.repo.mkdir()
        limits = self.config.limits
        memory = limits.memory_mb * (1 << 20) if limits.memory_mb else None
        self.group, self.limits_reason = await asyncio.to_thread(
            LimitGroup.create, memory, limits.pids_max, limits.cpus
        )
        self.limits_enforced = self.group is not None
        await asyncio.to_thread(write_owner, self.root, self.group)
        await self.record_start()

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
        argv = self._argv(command, cwd, env)
        before = self.group.oom_kills() if self.group else 0
        raw = await run_process(
            argv,
            timeout_s=timeout_s,
            output_limit=output_limit,
            env=_host_env(),
            stdin=stdin,
            kill_extra=self.group.kill_all if self.group else None,
        )
        oom = self.group is not None and self.group.oom_kills() > before
        return to_result(raw, oom=oom)

    async def read_file(self, path: str) -> bytes:
        self._check_open()
        quoted = shlex.quote(path)
        command = f"[ -f {quoted} ] || exit {MISSING_EXIT}; exec cat -- {quoted}"
        raw = await self._raw(command, output_limit=MAX_FILE_BYTES)
        if raw.returncode == MISSING_EXIT:
            raise SandboxFileNotFound(f"{path!r} is not a file in the sandbox (workdir {self.workdir})")
        if raw.returncode != 0 or raw.overflowed:
            raise SandboxError(
                f"reading {path!r} failed (exit {raw.returncode}, over {MAX_FILE_BYTES} bytes: "
                f"{raw.overflowed}): {raw.output[-300:]!r}"
            )
        return raw.output

    async def write_file(self, path: str, data: bytes | str) -> None:
        self._check_open()
        quoted = shlex.quote(path)
        payload = data.encode() if isinstance(data, str) else data
        raw = await self._raw(f'mkdir -p -- "$(dirname -- {quoted})" && cat > {quoted}', stdin=payload)
        if raw.returncode != 0:
            raise SandboxError(
                f"writing {path!r} failed (exit {raw.returncode}): {raw.output.decode(errors='replace')[-300:]}"
            )

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.group is not None:
            await asyncio.to_thread(self.group.remove)
        await asyncio.to_thread(remove_tree, self.root)

    async def _raw(self, command: str, *, output_limit: int = 1 << 16, stdin: bytes | None = None):
        return await run_process(
            self._argv(command, None, None),
            timeout_s=max(self.config.timeout_s, 60),
            output_limit=output_limit,
            env=_host_env(),
            stdin=stdin,
            kill_extra=self.group.kill_all if self.group else None,
        )

    def _argv(self, command: str, cwd: str | None, env: dict[str, str] | None) -> list[str]:
        workdir_source = self.overlay.merged if self.overlay else self.repo
        argv = [
            "bwrap",
            "--die-with-parent",
            "--new-session",
            "--unshare-all",
            "--cap-drop",
            "ALL",
            "--hostname",
            "roost-sandbox",
        ]
        if self.config.limits.network:
            argv.append("--share-net")
        argv += self._filesystem()
        argv += ["--bind", str(self.scratch), "/tmp", "--bind", str(workdir_source), self.workdir]
        # Extra read-only folders go last, so a folder under /tmp (a checkout's venv, say)
        # is not hidden by the sandbox's own /tmp.
        for path in self.config.bubblewrap.ro_binds:
            argv += ["--ro-bind-try", path, path]
        argv += ["--chdir", _inside(cwd, self.workdir), "--clearenv"]
        for key, value in self._environment(env).items():
            argv += ["--setenv", key, value]
        argv += [*self.config.shell, command]
        if self.overlay is not None:
            argv = self.overlay.wrap(argv)
        if self.group is not None:
            argv = ["/bin/sh", "-c", CGROUP_JOIN, "sh", *self.group.procs_files(), "--", *argv]
        return argv

    def _filesystem(self) -> list[str]:
        if self.spec.image is not None:
            args = ["--ro-bind", str(Path(self.spec.image).resolve()), "/"]
        else:
            args = []
            for folder in SYSTEM_DIRS:
                args += ["--ro-bind-try", folder, folder]
            for link in ROOT_LINKS:
                if os.path.islink(link):
                    args += ["--symlink", os.readlink(link), link]
                elif os.path.isdir(link):
                    args += ["--ro-bind", link, link]
        return args + ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm"]

    def _environment(self, extra: dict[str, str] | None) -> dict[str, str]:
        path = ":".join([*self.config.bubblewrap.path_prepend, BASE_PATH])
        env = {"PATH": path, "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
        return env | self.spec.env | (extra or {})


def _inside(cwd: str | None, workdir: str) -> str:
    if cwd is None:
        return workdir
    return cwd if cwd.startswith("/") else os.path.normpath(os.path.join(workdir, cwd))


def _host_env() -> dict[str, str]:
    # bwrap clears the environment itself; the host side needs only PATH to find its tools.
    return {"PATH": os.environ.get("PATH", BASE_PATH)}
