"""A tenant's checkpoints, as the REST client lists and deletes them: its saved states
(`tinker://<run>/weights/<name>`, type "training"), named sampler weights
(`tinker://<run>/sampler_weights/<name>`, type "sampler") and external weights
(`tinker://<run>/external_weights/<name>`, type "external"). Unnamed snapshots
(`save_weights_and_get_sampling_client`) are no checkpoints: they have no path.

Deleting one forgets it, removes its folder and frees what sampled it (its adapter in the base
model's engine, or a full-weight snapshot's own engine); loading it or sampling from it afterwards
gets a 404 that says it was deleted.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from . import wire
from .sampling import Samplers
from .sessions import Registry, UnknownName

SEGMENTS = {"weights": "training", "sampler_weights": "sampler", "external_weights": "external"}
"""A tinker path's middle segment → its checkpoint type."""


@dataclass
class Saved:
    """One checkpoint: its path, what kind it is, where its files are and when it was made."""

    path: str
    kind: str
    folder: Path
    created: float

    @property
    def run_id(self) -> str:
        return self.path.removeprefix("tinker://").split("/")[0]


def of_tenant(registry: Registry, samplers: Samplers, tenant: str) -> list[Saved]:
    """The tenant's checkpoints, oldest first."""
    states = [Saved(p, "training", s.folder, s.created) for p, s in registry.states.items() if s.tenant == tenant]
    sampler = [Saved(p, "sampler", s.folder, s.created) for p, s in samplers.saved.items() if s.tenant == tenant]
    external = [Saved(p, "external", s.folder, s.created) for p, s in registry.external.items() if s.tenant == tenant]
    return sorted(states + sampler + external, key=lambda c: c.created)


def of_run(registry: Registry, samplers: Samplers, tenant: str, run_id: str) -> list[Saved]:
    return [c for c in of_tenant(registry, samplers, tenant) if c.run_id == run_id]


async def described(saved: Saved) -> wire.Checkpoint:
    """The checkpoint as the SDK reads it; its size summed off the event loop."""
    size = await asyncio.to_thread(_size, saved.folder)
    return wire.Checkpoint(
        checkpoint_id=saved.path.split("/", 3)[3],
        checkpoint_type=saved.kind,
        time=datetime.fromtimestamp(saved.created, UTC),
        tinker_path=saved.path,
        size_bytes=size,
    )


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


async def delete(registry: Registry, samplers: Samplers, tenant: str, path: str) -> None:
    """Forget the tenant's checkpoint at `path` and remove its files (`UnknownName` if it has none there)."""
    found = [c for c in of_tenant(registry, samplers, tenant) if c.path == path]
    if not found:
        registry.check_not_deleted(path, tenant)
        raise UnknownName(f"no checkpoint at {path!r}; list_checkpoints(run_id) lists a run's checkpoints")
    registry.states.pop(path, None)
    registry.external.pop(path, None)
    registry.deleted[path] = tenant
    if (sampler := samplers.saved.pop(path, None)) is not None:
        await samplers.forget(sampler.weights)
    await asyncio.to_thread(shutil.rmtree, found[0].folder, True)
