"""Env server throughput: `roost bench env alfworld --json`.

Starts `python -m roost.envs.serve ENV` on a free port, then at each concurrency level
measures resets/s (create + delete, back to back), steps/s (live episodes stepping
with their first admissible command, restarted when they end) and the server's
resident memory per live episode (RSS of the server and its workers with that many
episodes open, minus their RSS before the first episode, divided by the number of
episodes; envs that keep per-episode state after an episode ends, such as ALFWorld's
pool of loaded games, are counted in full).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path

from roost.envs.client import EnvClient
from roost.envs.protocol import Reset, Step, TextAction
from roost.serving.process import start_reporting


@dataclass(frozen=True)
class BenchConfig:
    env: str = "alfworld"
    env_args: tuple[str, ...] = ()
    concurrency: tuple[int, ...] = (1, 8, 32)
    seconds: float = 5.0
    """Measuring time per quantity and level."""
    workers: int = 2
    split: str = "train"


@dataclass(frozen=True)
class BenchResult:
    env: str
    concurrency: int
    resets_per_s: float
    steps_per_s: float
    rss_mb_per_episode: float
    workers: int
    seconds: float


async def run_bench(config: BenchConfig) -> list[BenchResult]:
    async with _server(config) as (url, process):
        async with EnvClient(url) as client:
            baseline = _rss_mb(process.pid)
            return [await _level(client, process, config, c, baseline) for c in config.concurrency]


@contextlib.asynccontextmanager
async def _server(config: BenchConfig) -> AsyncIterator[tuple[str, subprocess.Popen]]:
    folder = tempfile.mkdtemp(prefix="roost-bench-env-")
    port_file = Path(folder) / "port"
    command = [
        sys.executable,
        "-m",
        "roost.envs.serve",
        config.env,
        "--port",
        "0",
        "--port-file",
        str(port_file),
        "--workers",
        str(config.workers),
        "--max-episodes",
        str(max(config.concurrency) + 8),
    ]
    for arg in config.env_args:
        command += ["--env-arg", arg]
    # started from the loop's own thread: the server dies with the thread that started it
    process, port = start_reporting(command, port_file, "env server", 120.0)
    try:
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.terminate()
        process.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)


async def _level(
    client: EnvClient, process: subprocess.Popen, config: BenchConfig, n: int, baseline: float
) -> BenchResult:
    resets = await _count(n, config.seconds, lambda: _reset_once(client, config.split))
    episodes = await asyncio.gather(*(client.create(split=config.split, seed=i) for i in range(n)))
    per_episode = max(0.0, _rss_mb(process.pid) - baseline) / n
    live = {eid: reset for eid, reset in episodes}
    steps = await _count(n, config.seconds, _stepper(client, live, config.split))
    await asyncio.gather(*(client.delete(eid) for eid in live))
    return BenchResult(
        config.env, n, round(resets, 2), round(steps, 2), round(per_episode, 2), config.workers, config.seconds
    )


async def _count(n: int, seconds: float, op) -> float:
    done = 0
    deadline = time.perf_counter() + seconds
    started = time.perf_counter()

    async def loop() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await op()
            done += 1

    await asyncio.gather(*(loop() for _ in range(n)))
    return done / (time.perf_counter() - started)


async def _reset_once(client: EnvClient, split: str) -> None:
    episode_id, _ = await client.create(split=split)
    await client.delete(episode_id)


def _stepper(client: EnvClient, live: dict[str, Reset | Step], split: str):
    idle = list(live)

    async def step_one() -> None:
        episode_id = idle.pop()
        last = live.pop(episode_id)
        step = await client.step(episode_id, TextAction(last.info["admissible_commands"][0]))
        if step.done:
            await client.delete(episode_id)
            episode_id, step = await client.create(split=split)
        live[episode_id] = step
        idle.append(episode_id)

    return step_one


def _rss_mb(pid: int) -> float:
    import psutil

    root = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**20


def as_json(results: list[BenchResult]) -> list[dict]:
    return [asdict(r) for r in results]
