"""Folders a server on another node reads by path (the model, an env's data), sent there through
Ray's object store: no path written on one node is read on another.

    stage_folder(model, where.engines[0])                        # the same path, written on that node
    kwargs = ray.get(on_node(prepare_env, where.envs[0]).remote(recipe))  # on the env server's node

A staged folder keeps its path: the node writes its own copy at the path the loop's node has, so
a server's config reads the same there as here. A node that already holds the same files (a
shared disk, an earlier stage) is left as it is.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _listing(folder: Path) -> dict[str, str]:
    """Each file under `folder` (a relative path) and its content hash."""
    return {str(p.relative_to(folder)): _sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def _write_folder(folder: str, listing: dict[str, str], payloads: list[Any]) -> bool:
    """On the target node: write the files (`payloads[0]`: one ref per file, in `listing`'s
    order) at `folder` unless it holds them already; whether it wrote them."""
    import ray

    target = Path(folder)
    if target.is_dir() and _listing(target) == listing:
        return False
    staging = target.with_name(f".{target.name}.staging-{uuid.uuid4().hex[:8]}")
    for name, ref in zip(listing, payloads[0], strict=True):
        path = staging / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(ray.get(ref))
    if target.exists():
        shutil.rmtree(target)
    os.replace(staging, target)
    return True


def stage_folder(folder: str | Path, options: dict[str, Any]) -> str:
    """Copy `folder` to the node `options` pin an actor to (its `scheduling_strategy`), at the
    same path; returns the path."""
    import ray

    source = Path(folder)
    if not source.is_dir():
        raise FileNotFoundError(f"cannot send {source} to another node: it is not a folder here")
    listing = _listing(source)
    refs = [ray.put((source / name).read_bytes()) for name in listing]
    # refs inside a list: the task fetches each file itself, on its own node
    ray.get(on_node(_write_folder, options).remote(str(source), listing, [refs]))
    return str(source)


def on_node(function: Callable[..., T], options: dict[str, Any]) -> Any:
    """`function` as a Ray task on the node `options` pin to, taking no CPU of its reservation."""
    import ray

    strategy = {"scheduling_strategy": options["scheduling_strategy"]} if "scheduling_strategy" in options else {}
    return ray.remote(function).options(num_cpus=0, **strategy)
