"""Sandbox fixtures: every backend, skipped only where it cannot run (docker: unless required)."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
from pathlib import Path

import pytest

from roost.sandboxes import SandboxConfig, SandboxLimits, SandboxSpec
from roost.sandboxes.registry import backend_class

BACKENDS = (pytest.param("docker", marks=pytest.mark.docker), "bubblewrap", "local")


def docker_required() -> bool:
    return os.environ.get("ROOST_REQUIRE_DOCKER") == "1"


# The contract's diff() runs git inside the sandbox; the CI base image may not carry it.
TEST_IMAGE = "roost-sandbox-test:latest"
TEST_DOCKERFILE = """FROM {base}
RUN command -v git >/dev/null || (apt-get update -qq && \\
    apt-get install -y -qq --no-install-recommends git >/dev/null && rm -rf /var/lib/apt/lists/*)
"""


@functools.cache
def docker_test_image(base: str) -> str:
    """`base` plus git, built once per test session (the engine caches the layer too)."""
    import io

    import docker

    client = docker.from_env(timeout=600)
    try:
        client.images.build(
            fileobj=io.BytesIO(TEST_DOCKERFILE.format(base=base).encode()), tag=TEST_IMAGE, rm=True, forcerm=True
        )
    finally:
        client.close()
    return TEST_IMAGE


async def backend_or_skip(name: str, config: SandboxConfig):
    backend = backend_class(name)(config)
    reason = await backend.available()
    if reason is not None:
        if name == "docker" and docker_required():
            pytest.fail(f"ROOST_REQUIRE_DOCKER=1 but {reason}")
        pytest.skip(f"{name}: {reason}")
    if name == "docker":
        base = config.docker.default_image or os.environ.get("ROOST_BASE_IMAGE")
        if not base:
            if docker_required():
                pytest.fail("ROOST_REQUIRE_DOCKER=1 but ROOST_BASE_IMAGE is not set")
            pytest.skip("docker: ROOST_BASE_IMAGE is not set")
        config.docker.default_image = await asyncio.to_thread(docker_test_image, base)
    return backend


def make_repo(path: Path, files: dict[str, str]) -> Path:
    """A git repository with `files` committed once."""
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=path, check=True)
    subprocess.run([*git, "commit", "-qm", "start"], cwd=path, check=True)
    return path


@pytest.fixture(params=BACKENDS)
def backend_name(request) -> str:
    return request.param


@pytest.fixture
def limits() -> SandboxLimits:
    return SandboxLimits(memory_mb=128, pids_max=128, cpus=1.0)


@pytest.fixture
async def backend(backend_name, limits):
    return await backend_or_skip(backend_name, SandboxConfig(backend=backend_name, limits=limits, timeout_s=30))


@pytest.fixture
def git_repo():
    """make_repo, for tests that build their own repositories."""
    return make_repo


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_repo(tmp_path / "repo", {"a.txt": "hello\n", "pkg/mod.py": "X = 1\n"})


@pytest.fixture
async def sandbox(backend, repo):
    sb = await backend.start(SandboxSpec(directory=repo))
    yield sb
    await sb.close()
