"""The docker backend's image for SWE tasks that start from a folder (roost's fixtures).

It is the base image plus git and a Python with pytest, tagged by a hash of the Dockerfile
below and the base image, and built once per engine.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import tarfile

from roost.sandboxes import SandboxUnavailable

DOCKERFILE = """ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
RUN if ! command -v git >/dev/null; then \\
        apt-get update -qq && apt-get install -y -qq --no-install-recommends git >/dev/null \\
        && rm -rf /var/lib/apt/lists/*; \\
    fi
RUN python3 -m venv /opt/swe && /opt/swe/bin/pip install --no-cache-dir -q "pytest>=8"
ENV PATH=/opt/swe/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONDONTWRITEBYTECODE=1
WORKDIR /testbed
"""
REPOSITORY = "roost-swe-sandbox"


def image_tag(base_image: str | None) -> str:
    digest = hashlib.sha256((DOCKERFILE + (base_image or "")).encode()).hexdigest()[:12]
    return f"{REPOSITORY}:{digest}"


async def swe_sandbox_image(base_image: str | None = None) -> str:
    """The image's tag, building it once per Dockerfile and base (default base: $ROOST_BASE_IMAGE)."""
    base = base_image or os.environ.get("ROOST_BASE_IMAGE")
    return await asyncio.to_thread(_ensure, base)


def _ensure(base: str | None) -> str:
    import docker

    tag = image_tag(base)
    client = docker.from_env(timeout=900)
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(DOCKERFILE.encode())
        tar.addfile(info, io.BytesIO(DOCKERFILE.encode()))
    context.seek(0)
    try:
        client.images.build(
            fileobj=context,
            custom_context=True,
            tag=tag,
            rm=True,
            forcerm=True,
            buildargs={"BASE_IMAGE": base} if base else None,
        )
    except docker.errors.BuildError as exc:
        log = "".join(chunk.get("stream", "") for chunk in exc.build_log)[-2000:]
        raise SandboxUnavailable(
            f"building the SWE sandbox image from {base or 'python:3.11-slim'} failed: {exc}\n{log}"
        ) from exc
    finally:
        client.close()
    return tag
