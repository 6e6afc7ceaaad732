"""`roost bench weight-sync`: one weight update into roost's embedded engine, by each transport.

`disk`: the trainer writes its state dict as a Hugging Face folder (safetensors) and the engine
loads it (`/update_weights_from_disk`); the row splits the write from the load. `http`: the
state dict goes to the engine in chunks and is committed (`/roost/weights/*`), nothing written.
Both on this machine, over loopback, with no gateway: `paused_s` is what a gateway in front would
wait for (disk: the load; http: the commit alone, the send happens while the engine serves).
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.engine.tiny_model import resolve_model
from roost.rollout.engine.weights import read_checkpoint
from roost.trainer.weight_push import tensor_bytes
from roost.trainer.weight_sync import sync_weights


@dataclass(frozen=True)
class WeightSyncBenchConfig:
    model: str = "tiny"
    repeats: int = 3
    chunk_mb: int = 64


def write_folder(tensors: dict[str, torch.Tensor], source: Path, folder: Path) -> float:
    """The trainer's half of a disk sync: `tensors` as a Hugging Face folder (with `source`'s
    config, which the engine checks the weights against); the seconds it took."""
    from safetensors.torch import save_file

    started = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(source / "config.json", folder / "config.json")
    save_file(tensors, str(folder / "model.safetensors"))
    return time.perf_counter() - started


async def _disk(engine: EngineProcess, tensors, source: Path, root: Path, i: int) -> dict[str, float]:
    folder = root / f"v{i}"
    write_s = await asyncio.to_thread(write_folder, tensors, source, folder)
    result = await sync_weights(engine.url, folder, weight_version=f"disk-{i}", engine_key=engine.api_key)
    shutil.rmtree(folder)
    return {"s": write_s + result.seconds, "write_s": write_s, "load_s": result.seconds, "paused_s": result.paused_s}


async def _http(engine: EngineProcess, tensors, chunk_bytes: int, i: int) -> dict[str, float]:
    result = await sync_weights(
        engine.url,
        tensors=tensors,
        transport="http",
        chunk_bytes=chunk_bytes,
        weight_version=f"http-{i}",
        engine_key=engine.api_key,
    )
    return {"s": result.seconds, "paused_s": result.paused_s}


def medians(rows: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the repeats, as `<figure>_median`."""
    return {f"{key}_median": round(statistics.median(r[key] for r in rows), 4) for key in rows[0]}


async def _measure(config: WeightSyncBenchConfig, engine: EngineProcess, source: Path) -> dict:
    tensors = read_checkpoint(source)
    disk, http = [], []
    with tempfile.TemporaryDirectory(prefix="roost-bench-sync-") as root:
        for i in range(config.repeats):  # alternated, so neither transport gets the warmer machine
            disk.append(await _disk(engine, tensors, source, Path(root), i))
            http.append(await _http(engine, tensors, config.chunk_mb * 1024 * 1024, i))
    return {
        "model": config.model,
        "bytes": tensor_bytes(tensors),
        "tensors": len(tensors),
        "repeats": config.repeats,
        "chunk_mb": config.chunk_mb,
        "disk": medians(disk),
        "http": medians(http),
    }


def run_bench(config: WeightSyncBenchConfig) -> dict:
    source = resolve_model(config.model)
    engine = EngineProcess(str(source))
    with engine:
        return asyncio.run(_measure(config, engine, source))
