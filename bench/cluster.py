"""`roost bench cluster`: one weight update into every engine behind a gateway, by each transport,
for 1, 2 and 4 engines.

For each engine count N, N `roost engine` subprocesses serve the model with one engine key and
a gateway (a thread of this process) fronts them; `sync_weights` named the first engine syncs
every engine the gateway lists, the gateway paused for the commit and the version barrier
(`roost.trainer.sync_engines`). `disk`: the state dict is written once as a Hugging Face folder
and every engine loads it; `http`: the state dict goes to every engine in chunks, in parallel,
nothing written. Updates alternate the transports, as `roost bench weight-sync` does, and the
rows give medians. After the last update each engine is asked its weight version, and the
gateway its engines' states, so a row never stands for a sync that left an engine behind.

Every engine runs on this machine and is reached over loopback: they share its cores and its
page cache, so the seconds and bytes are loopback figures, not a network's.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from roost.bench.weight_sync import medians, write_folder
from roost.rollout.engine.launch import EngineProcess
from roost.rollout.engine.tiny_model import resolve_model
from roost.rollout.engine.weights import read_checkpoint
from roost.rollout.engine_api.sglang_client import SGLangClient
from roost.rollout.engine_api.weight_upload import chunked, encode_chunk
from roost.rollout.gateway.config import GatewayConfig
from roost.rollout.gateway.control.client import GatewayClient
from roost.rollout.gateway.launch import GatewayThread
from roost.rollout.keys import ENGINE_KEY, new_key
from roost.trainer.weight_push import tensor_bytes
from roost.trainer.weight_sync import SyncResult, sync_weights

LOOPBACK_NOTE = (
    "all engines and the gateway run on this one machine over loopback (127.0.0.1): they share "
    "its cores and page cache, so seconds and bytes moved are loopback figures, not a network's"
)


@dataclass(frozen=True)
class ClusterBenchConfig:
    model: str = "tiny"
    """'tiny' or a Hugging Face folder, served by every engine."""
    engines: tuple[int, ...] = (1, 2, 4)
    """Engine counts measured, each with engines and a gateway of its own."""
    repeats: int = 3
    """Updates per transport and engine count (alternated; medians reported)."""
    chunk_mb: int = 64
    """The http transport's chunk budget, in MiB."""

    def __post_init__(self) -> None:
        if not self.engines or min(self.engines) < 1:
            raise ValueError(f"engine counts must be 1 or more, got {list(self.engines)}; e.g. --engines 1,2,4")
        if self.repeats < 1:
            raise ValueError(f"repeats must be 1 or more, got {self.repeats}")


@dataclass
class Cluster:
    """N engines sharing one engine key, and the gateway in front of them."""

    engines: list[EngineProcess]
    gateway: GatewayThread
    engine_key: str

    async def sync(self, **how) -> SyncResult:
        """`sync_weights` through the gateway: every engine it lists takes the update."""
        gateway = self.gateway
        return await sync_weights(
            self.engines[0].url,
            engine_key=self.engine_key,
            gateway_url=gateway.url,
            admin_key=gateway.admin_key,
            **how,
        )


@contextlib.contextmanager
def running_cluster(source: Path, count: int, store: Path) -> Iterator[Cluster]:
    """Start `count` engines of `source` and a gateway before them; all stopped on the way out,
    whatever happens. The engines start one after another from this thread: each is armed to die
    with the thread that started it (`roost.lifetime.die_with_parent`), so a pool's threads
    would take them down when they end."""
    key = new_key(ENGINE_KEY)
    with contextlib.ExitStack() as stack:
        engines = []
        for _ in range(count):
            engine = EngineProcess(str(source), api_key=key, extra_args=["--log-level", "warning"])
            stack.callback(engine.stop)
            engine.start()
            engines.append(engine)
        config = GatewayConfig(
            engine_urls=[e.url for e in engines], model=str(source), store_path=store, engine_key=key
        )
        gateway = GatewayThread(config)
        stack.enter_context(gateway)
        yield Cluster(engines, gateway, key)


def http_body_bytes(tensors: dict[str, torch.Tensor], chunk_bytes: int) -> int:
    """What one engine receives over http: the chunks' bodies as the sender encodes them
    (safetensors bytes, headers included; the begin and commit requests are left out)."""
    return sum(len(encode_chunk({name: tensors[name] for name in names})) for names in chunked(tensors, chunk_bytes))


async def _disk(cluster: Cluster, tensors, source: Path, root: Path, version: str) -> dict[str, float]:
    folder = root / version
    write_s = await asyncio.to_thread(write_folder, tensors, source, folder)
    result = await cluster.sync(folder=folder, weight_version=version)
    shutil.rmtree(folder)
    return {"s": write_s + result.seconds, "write_s": write_s, "load_s": result.seconds, "paused_s": result.paused_s}


async def _http(cluster: Cluster, tensors, chunk_bytes: int, version: str) -> dict[str, float]:
    result = await cluster.sync(tensors=tensors, transport="http", chunk_bytes=chunk_bytes, weight_version=version)
    return {"s": result.seconds, "paused_s": result.paused_s}


async def _where_engines_ended(cluster: Cluster) -> dict:
    """Each engine's own weight version, and the state the gateway holds for each."""
    versions = []
    for engine in cluster.engines:
        async with SGLangClient(engine.url, api_key=cluster.engine_key) as client:
            versions.append((await client.model_info())["weight_version"])
    async with GatewayClient(cluster.gateway.url, admin_key=cluster.gateway.admin_key) as gateway:
        listed = await gateway.engines()
    return {
        "engine_weight_versions": versions,
        "gateway_weight_version": listed.weight_version,
        "gateway_engine_states": [e.state for e in listed.engines],
    }


@dataclass(frozen=True)
class _Sizes:
    """Bytes one update moves, per engine: the folder written (disk) and read, or the http bodies."""

    written: int
    read: int
    sent: int


async def _measure(config: ClusterBenchConfig, cluster: Cluster, tensors, source: Path, sizes: _Sizes) -> dict:
    count = len(cluster.engines)
    disk, http = [], []
    with tempfile.TemporaryDirectory(prefix="roost-bench-cluster-") as root:
        for i in range(config.repeats):  # alternated, so neither transport gets the warmer machine
            disk.append(await _disk(cluster, tensors, source, Path(root), f"n{count}-disk-{i}"))
            http.append(await _http(cluster, tensors, config.chunk_mb * 1024 * 1024, f"n{count}-http-{i}"))
    rows = [
        {
            "engines": count,
            "transport": "disk",
            **medians(disk),
            "bytes_written": sizes.written,
            "bytes_read": count * sizes.read,
            "bytes_moved": sizes.written + count * sizes.read,
        },
        {"engines": count, "transport": "http", **medians(http), "bytes_moved": count * sizes.sent},
    ]
    ended = {"engines": count, "last_weight_version": f"n{count}-http-{config.repeats - 1}"}
    return {"rows": rows, "ended": {**ended, **await _where_engines_ended(cluster)}}


def _sizes(tensors, source: Path, chunk_bytes: int) -> _Sizes:
    with tempfile.TemporaryDirectory(prefix="roost-bench-cluster-") as root:
        folder = Path(root) / "sized"
        write_folder(tensors, source, folder)
        written = sum(p.stat().st_size for p in folder.iterdir())
        read = sum(p.stat().st_size for p in folder.glob("*.safetensors"))  # what an engine loads
    return _Sizes(written, read, http_body_bytes(tensors, chunk_bytes))


def run_bench(config: ClusterBenchConfig, progress: Callable[[str], None] = lambda line: None) -> dict:
    """Measure every engine count of `config`; `progress` gets a line as each count starts and ends."""
    source = resolve_model(config.model)
    tensors = read_checkpoint(source)
    sizes = _sizes(tensors, source, config.chunk_mb * 1024 * 1024)
    rows, ended = [], []
    for count in config.engines:
        progress(f"cluster bench: {count} engine(s): starting them and a gateway")
        with tempfile.TemporaryDirectory(prefix="roost-bench-cluster-store-") as store:
            with running_cluster(source, count, Path(store) / "trajectories.sqlite") as cluster:
                measured = asyncio.run(_measure(config, cluster, tensors, source, sizes))
        rows += measured["rows"]
        ended.append(measured["ended"])
        disk, http = measured["rows"]
        progress(
            f"cluster bench: {count} engine(s): disk {disk['s_median']:.2f} s (paused {disk['paused_s_median']:.2f} s), "
            f"http {http['s_median']:.2f} s (paused {http['paused_s_median']:.2f} s), medians of {config.repeats}"
        )
    return {
        "model": config.model,
        "tensor_bytes": tensor_bytes(tensors),
        "tensors": len(tensors),
        "repeats": config.repeats,
        "chunk_mb": config.chunk_mb,
        "note": LOOPBACK_NOTE,
        "rows": rows,
        "ended": ended,
    }
