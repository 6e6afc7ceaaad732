"""Run an env server in a container: `roost serve ENV --docker`.

The image is built from the env's own Dockerfile (`envs/<name>/Dockerfile`) in a
context that holds the `roost.envs` package and nothing else of roost. Its tag is a
hash of that context and the base image, so an image is built once and reused until
the code changes. Builds pass `BASE_IMAGE` (default: `$ROOST_BASE_IMAGE`, else the
Dockerfile's own default) and the host's proxy variables.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roost.envs.registry import EnvSpec

CONTAINER_PORT = 8000
CONTAINER_DATA = "/data"
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


class ContainerError(RuntimeError):
    """The image did not build, or the container did not become healthy."""


@dataclass(frozen=True)
class ContainerConfig:
    spec: EnvSpec
    base_image: str | None = None
    host_port: int = 0
    """0: Docker picks a free port on 127.0.0.1."""
    data_dir: Path | None = None
    """Mounted read-only at /data and passed to the env as `data_dir`."""
    server_args: list[str] = field(default_factory=list)
    """Extra arguments of `python -m roost.envs.serve` inside the container."""
    start_timeout_s: float = 180.0


def build_context(spec: EnvSpec, into: Path) -> Path:
    """Lay out the build context: the env's Dockerfile and requirements, `roost/envs`,
    `roost/sandboxes` (envs that run commands, such as SWE and Hermes, use it in the container),
    `roost/serving` (the server's listening socket) and the top-level modules the server imports: `key_value` (its --env-arg values),
    `lifetime` (how its worker processes end),
    `metrics_http` (its /metrics), `logging_setup` (its --log-level, --log-json) and `tracing`
    (its spans, off unless asked for; OpenTelemetry itself is not in the image)."""
    import roost
    import roost.envs
    import roost.key_value
    import roost.lifetime
    import roost.logging_setup
    import roost.metrics_http
    import roost.sandboxes
    import roost.serving
    import roost.tracing

    package = spec.package_dir
    if package is None or not (package / "Dockerfile").is_file():
        raise ContainerError(f"env {spec.name!r} ships no Dockerfile (looked in {package})")
    for name in ("Dockerfile", "requirements.txt"):
        if (package / name).is_file():
            shutil.copy2(package / name, into / name)
    (into / "roost").mkdir()
    shutil.copy2(Path(roost.__file__), into / "roost" / "__init__.py")
    for module in (roost.key_value, roost.lifetime, roost.metrics_http, roost.logging_setup, roost.tracing):
        shutil.copy2(Path(module.__file__), into / "roost" / Path(module.__file__).name)
    for package in (roost.envs, roost.sandboxes, roost.serving):
        name = Path(package.__file__).parent.name
        shutil.copytree(
            Path(package.__file__).parent, into / "roost" / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    return into


def context_digest(context: Path, base_image: str | None) -> str:
    digest = hashlib.sha256((base_image or "").encode())
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        digest.update(path.relative_to(context).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def docker_client():
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # noqa: BLE001 - the SDK raises several types for "no engine"
        raise ContainerError(f"no Docker engine answers ({exc}); start one, or set DOCKER_HOST") from exc
    return client


def ensure_image(client: Any, spec: EnvSpec, base_image: str | None = None, log=print) -> str:
    """The image tag for `spec`, building it if no image with that tag exists yet."""
    import docker

    base_image = base_image or os.environ.get("ROOST_BASE_IMAGE") or None
    with tempfile.TemporaryDirectory(prefix="roost-image-") as tmp:
        context = build_context(spec, Path(tmp))
        tag = f"roost-env-{spec.name.replace(':', '-').replace('.', '-').lower()}:{context_digest(context, base_image)}"
        try:
            client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            pass
        log(f"building {tag} from {spec.package_dir / 'Dockerfile'}" + (f" on {base_image}" if base_image else ""))
        buildargs = {k: v for k, v in os.environ.items() if k in PROXY_VARS}
        if base_image:
            buildargs["BASE_IMAGE"] = base_image
        lines = []
        for chunk in client.api.build(
            path=str(context), tag=tag, buildargs=buildargs, rm=True, forcerm=True, pull=False, decode=True
        ):
            if "stream" in chunk:
                lines.append(chunk["stream"])
            if "error" in chunk:
                tail = "".join(lines[-30:])
                raise ContainerError(f"building {tag} failed: {chunk['error'].strip()}\n{tail}")
        _untag_older(client, tag)
        return tag


def _untag_older(client: Any, tag: str) -> None:
    """Drop the env's images built from older code (layers in use by containers stay)."""
    import docker

    repository = tag.split(":", 1)[0]
    for image in client.images.list(name=repository):
        for old in image.tags:
            if old != tag:
                try:
                    client.images.remove(old)
                except docker.errors.APIError:
                    pass


class EnvContainer:
    """A running env server container; `url` once `start` returns, removed by `stop`."""

    def __init__(self, client: Any, image: str, config: ContainerConfig) -> None:
        self.client = client
        self.image = image
        self.config = config
        self.container: Any = None
        self.url = ""

    def start(self) -> str:
        command = [
            "python3",
            "-m",
            "roost.envs.serve",
            self.config.spec.name,
            "--host",
            "0.0.0.0",
            "--port",
            str(CONTAINER_PORT),
        ]
        for value in self.config.spec.container.env_args:
            command += ["--env-arg", value]
        volumes = {}
        if self.config.data_dir is not None:
            volumes[str(Path(self.config.data_dir).resolve())] = {"bind": CONTAINER_DATA, "mode": "ro"}
            command += ["--env-arg", f"data_dir={CONTAINER_DATA}"]
        created = self.client.api.create_container(
            self.image,
            command + list(self.config.server_args),
            ports=[CONTAINER_PORT],
            labels={"roost.env": self.config.spec.name},
            host_config=self._host_config(volumes),
        )
        self.container = self.client.containers.get(created["Id"])
        try:
            self.container.start()
            self.url = f"http://127.0.0.1:{self._host_port()}"
            self._wait_healthy()
        except BaseException:
            self.stop()  # a container that never served is nobody's to remove later
            raise
        return self.url

    def _host_config(self, volumes: dict[str, dict[str, str]]) -> dict[str, Any]:
        """Docker's host config: the port on 127.0.0.1, the data mount, and what the env's spec needs."""
        needs = self.config.spec.container
        host_config = self.client.api.create_host_config(
            binds=volumes,
            port_bindings={CONTAINER_PORT: ("127.0.0.1", self.config.host_port or None)},
            shm_size=needs.shm_size,
            init=needs.init or None,
            security_opt=["seccomp=unconfined", "apparmor=unconfined"] if needs.nested_sandbox else None,
        )
        if needs.nested_sandbox:
            # What `docker run --security-opt systempaths=unconfined` sends (the SDK has no word for
            # it): a user namespace may mount a fresh /proc only where no part of /proc is covered.
            host_config.update(MaskedPaths=[], ReadonlyPaths=[])
        return host_config

    def stop(self) -> None:
        if self.container is not None:
            try:
                self.container.remove(force=True)
            finally:
                self.container = None

    def logs(self, tail: int = 50) -> str:
        return self.container.logs(tail=tail).decode(errors="replace") if self.container is not None else ""

    def _host_port(self) -> int:
        for _ in range(50):
            self.container.reload()
            bindings = (self.container.attrs["NetworkSettings"]["Ports"] or {}).get(f"{CONTAINER_PORT}/tcp")
            if bindings:
                return int(bindings[0]["HostPort"])
            time.sleep(0.1)
        raise ContainerError(f"container {self.container.short_id} publishes no port\n{self.logs()}")

    def _wait_healthy(self) -> None:
        import httpx

        deadline = time.monotonic() + self.config.start_timeout_s
        while time.monotonic() < deadline:
            self.container.reload()
            if self.container.status == "exited":
                raise ContainerError(f"container {self.container.short_id} exited while starting\n{self.logs()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise ContainerError(
            f"{self.url}/health did not answer within {self.config.start_timeout_s:.0f}s\n{self.logs()}"
        )
