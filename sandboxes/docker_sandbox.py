"""The `docker` backend: one long-lived container per episode, one `docker exec` per command.

The container runs a keeper (`sleep infinity` under the engine's init, which reaps orphans)
with no network, and memory (no swap), pids and CPU limits. The docker SDK is synchronous, so
every call runs in a worker thread. Docker cannot kill an exec, so a command past its timeout
or output cap is ended from inside: a second exec kills every process but init and the
keeper; if even that cannot start (a fork bomb at the pids limit), the container restarts,
which keeps its files. An OOM kill is read from the container's own cgroup counter.
"""

from __future__ import annotations

import asyncio
import io
import os
import posixpath
import shlex
import tarfile
import tempfile
import threading
import time
import uuid
from pathlib import Path

from .base import SandboxBase
from .config import SandboxConfig
from .errors import SandboxError, SandboxFileNotFound, SandboxUnavailable
from .protocol import Capabilities, ExecResult, Outcome, SandboxSpec

KEEPER_PID_FILE = "/.roost-keeper.pid"
KEEPER = f"echo $$ > {KEEPER_PID_FILE} && exec sleep infinity"
KILL_ALL = (
    f"keeper=$(cat {KEEPER_PID_FILE} 2>/dev/null); for round in 1 2 3; do "
    "for d in /proc/[0-9]*; do p=${d#/proc/}; case $p in 1|$$|$keeper) ;; "
    "*) kill -9 $p 2>/dev/null;; esac; done; done; true"
)
OOM_COUNTER = (
    "cat /sys/fs/cgroup/memory.events 2>/dev/null || cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || true"
)
# Docker carries stdout and stderr as separate streams, which loses their interleaving: one pipe keeps it.
MERGE_STDERR = ["/bin/sh", "-c", 'exec "$@" 2>&1', "sh"]
LABEL = "roost.sandbox"
DRAIN_S = 5.0


class DockerBackend:
    """Starts DockerSandbox on the engine at DOCKER_HOST (or the configured address)."""

    name = "docker"
    capabilities = Capabilities(filesystem_isolated=True, network_isolated=True, limits_enforced=True)

    def __init__(self, config: SandboxConfig):
        self.config = config
        self._client = None

    def client(self):
        if self._client is None:
            import docker

            options = self.config.docker
            self._client = (
                docker.DockerClient(base_url=options.base_url, timeout=120)
                if options.base_url
                else docker.from_env(timeout=120)
            )
        return self._client

    async def available(self) -> str | None:
        def ping() -> str | None:
            try:
                import docker
            except ImportError:
                return "the docker SDK is not installed; `pip install docker` (roost's 'sandboxes' extra)"
            try:
                options = self.config.docker
                probe = (
                    docker.DockerClient(base_url=options.base_url, timeout=options.ping_timeout_s)
                    if options.base_url
                    else docker.from_env(timeout=options.ping_timeout_s)
                )
                probe.ping()
                probe.close()
            except Exception as exc:  # the SDK raises several unrelated types for "no engine"
                return f"no Docker engine answers ({type(exc).__name__}: {exc}); start dockerd or set DOCKER_HOST"
            return None

        return await asyncio.to_thread(ping)

    def image_for(self, spec: SandboxSpec) -> str:
        image = spec.image or self.config.docker.default_image or os.environ.get("ROOST_BASE_IMAGE")
        if not image:
            raise SandboxUnavailable(
                "no image for a docker sandbox: name one in the spec, set "
                "docker.default_image, or export ROOST_BASE_IMAGE"
            )
        return image

    async def start(self, spec: SandboxSpec) -> DockerSandbox:
        image = self.image_for(spec)
        sandbox = DockerSandbox(self.config, spec, self.client())
        try:
            await asyncio.to_thread(sandbox.create_container, image)
            if spec.directory is not None:
                await sandbox.copy_in(spec.directory)
            await sandbox.record_start()
            sandbox.oom_seen = await sandbox.oom_kills()
        except BaseException:
            await sandbox.close()
            raise
        return sandbox


class DockerSandbox(SandboxBase):
    backend = "docker"
    limits_enforced = True

    def __init__(self, config: SandboxConfig, spec: SandboxSpec, client):
        super().__init__(config, spec)
        self.client = client
        self.api = client.api
        self.workdir = spec.workdir
        self.container = None
        self.oom_seen = 0

    def create_container(self, image: str) -> None:
        import docker

        limits = self.config.limits
        kwargs: dict = {"network_mode": "bridge" if limits.network else "none"}
        if limits.memory_mb is not None:
            kwargs |= {"mem_limit": f"{limits.memory_mb}m", "memswap_limit": f"{limits.memory_mb}m"}
        if limits.pids_max is not None:
            kwargs["pids_limit"] = limits.pids_max
        if limits.cpus is not None:
            kwargs["nano_cpus"] = int(limits.cpus * 1e9)
        try:
            self.container = self.client.containers.run(
                image,
                ["/bin/sh", "-c", KEEPER],
                detach=True,
                init=self.config.docker.init,
                name=f"roost-sandbox-{uuid.uuid4().hex[:12]}",
                working_dir=self.workdir,
                labels={LABEL: "1"},
                security_opt=["no-new-privileges"],
                **kwargs,
            )
        except docker.errors.ImageNotFound as exc:
            raise SandboxUnavailable(
                f"image {image!r} is not on the Docker engine ({exc}); build or load "
                "it first (images cannot be pulled here)"
            ) from exc
        except docker.errors.APIError as exc:
            raise SandboxError(f"could not start a container from {image!r}: {exc}") from exc

    async def copy_in(self, directory: Path) -> None:
        if not directory.is_dir():
            raise SandboxError(f"sandbox source {directory} is not a directory; pass a repository folder")
        with tempfile.TemporaryFile() as archive:

            def pack_and_put() -> None:
                with tarfile.open(fileobj=archive, mode="w") as tar:
                    tar.add(str(directory), arcname=".")
                archive.seek(0)
                if not self.container.put_archive(self.workdir, archive):
                    raise SandboxError(f"copying {directory} into {self.workdir} failed")

            await asyncio.to_thread(pack_and_put)

    async def exec(
        self,
        command: str,
        *,
        timeout_s: float | None = None,
        output_limit: int | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        self._check_open()
        timeout_s, output_limit = self._defaults(timeout_s, output_limit)
        start = time.monotonic()
        exec_id = await asyncio.to_thread(
            self.api.exec_create,
            self.container.id,
            [*MERGE_STDERR, *self.config.shell, command],
            workdir=_inside(cwd, self.workdir),
            environment={**self.spec.env, **(env or {})},
        )
        reader = _StreamReader(self.api, exec_id["Id"], output_limit)
        done = await reader.wait(timeout_s)
        if not done or reader.overflowed.is_set():
            await self._kill_everything()
            await reader.wait(DRAIN_S)
            outcome = Outcome.output_limit if done else Outcome.timeout
            return ExecResult(reader.text(), None, outcome, time.monotonic() - start, truncated=done)
        if reader.error is not None:
            raise SandboxError(f"docker exec failed: {reader.error}") from reader.error
        info = await asyncio.to_thread(self.api.exec_inspect, exec_id["Id"])
        code = info.get("ExitCode")
        outcome = Outcome.exited
        if code == 137 and await self._new_oom_kill():
            outcome = Outcome.oom_killed
        return ExecResult(reader.text(), code, outcome, time.monotonic() - start)

    async def oom_kills(self) -> int:
        result = await self.exec(OOM_COUNTER, timeout_s=30)
        for line in result.output.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "oom_kill":
                return int(parts[1])
        return 0

    async def _new_oom_kill(self) -> bool:
        count = await self.oom_kills()
        new = count > self.oom_seen
        self.oom_seen = count
        return new

    async def _kill_everything(self) -> None:
        def kill() -> None:
            try:
                exec_id = self.api.exec_create(self.container.id, ["/bin/sh", "-c", KILL_ALL])
                self.api.exec_start(exec_id["Id"])
                if self.api.exec_inspect(exec_id["Id"]).get("ExitCode") == 0:
                    return
            except Exception:  # the engine refused the exec (pids limit): fall through
                pass
            self.container.restart(timeout=0)

        await asyncio.to_thread(kill)

    async def read_file(self, path: str) -> bytes:
        self._check_open()
        import docker

        target = _inside(path, self.workdir)

        def get() -> bytes:
            try:
                stream, stat = self.container.get_archive(target)
            except docker.errors.NotFound as exc:
                raise SandboxFileNotFound(f"{path!r} is not a file in the sandbox ({target})") from exc
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                member = tar.next()
                if member is None or not member.isfile():
                    raise SandboxFileNotFound(f"{path!r} is not a regular file in the sandbox ({target})")
                return tar.extractfile(member).read()

        return await asyncio.to_thread(get)

    async def write_file(self, path: str, data: bytes | str) -> None:
        self._check_open()
        target = _inside(path, self.workdir)
        payload = data.encode() if isinstance(data, str) else data
        folder, name = posixpath.split(target)
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(payload), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(payload))
        made = await self.exec(f"mkdir -p -- {shlex.quote(folder)}", timeout_s=30)
        if not made.ok:
            raise SandboxError(f"cannot create {folder!r} in the sandbox: {made.output.strip()[-300:]}")
        if not await asyncio.to_thread(self.container.put_archive, folder, archive.getvalue()):
            raise SandboxError(f"writing {path!r} into the container failed")

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.container is not None:
            container = self.container

            def remove() -> None:
                try:
                    container.remove(force=True)
                except Exception:  # already gone (engine restarted): nothing left to free
                    pass

            await asyncio.to_thread(remove)


class _StreamReader:
    """Reads one exec's output in a worker thread, keeping the first `limit` bytes."""

    def __init__(self, api, exec_id: str, limit: int):
        self.buffer = bytearray()
        self.limit = limit
        self.overflowed = threading.Event()
        self.error: Exception | None = None
        self.finished = asyncio.get_running_loop().create_future()
        loop = asyncio.get_running_loop()

        def run() -> None:
            try:
                for chunk in api.exec_start(exec_id, stream=True, demux=False):
                    room = self.limit - len(self.buffer)
                    if room > 0:
                        self.buffer.extend(chunk[:room])
                    if len(chunk) > room:
                        self.overflowed.set()
                        loop.call_soon_threadsafe(_resolve, self.finished)
            except Exception as exc:
                self.error = exc
            loop.call_soon_threadsafe(_resolve, self.finished)

        self.thread = threading.Thread(target=run, daemon=True, name=f"roost-docker-exec-{exec_id[:8]}")
        self.thread.start()

    async def wait(self, timeout_s: float) -> bool:
        """True when the stream ended (or overflowed) within `timeout_s`."""
        try:
            await asyncio.wait_for(asyncio.shield(self.finished), timeout_s)
            return True
        except TimeoutError:
            return False

    def text(self) -> str:
        return bytes(self.buffer).decode("utf-8", errors="replace")


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


def _inside(path: str | None, workdir: str) -> str:
    if path is None:
        return workdir
    return path if path.startswith("/") else posixpath.normpath(posixpath.join(workdir, path))
