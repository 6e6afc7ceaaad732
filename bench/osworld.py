"""OSWorld desktops: `roost bench env osworld --json`.

Starts the env server (local desktops unless `--env-arg backend=docker`) and, at each
concurrency level, runs that many episodes of one task (a terminal task of the split where there
is one) at once: each resets (desktop start plus the task's
config steps), then steps `steps` times with a small pyautogui action (each step runs the
action, then takes the screenshot and the accessibility tree the observation needs). Reports
the median reset and step times, and the resident memory per desktop: the RSS of the server,
its workers and every desktop process under them with all episodes open, minus the RSS
before the first episode, divided by the number of desktops.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import asdict, dataclass

from roost.bench.env import BenchConfig, _rss_mb, _server
from roost.envs.client import EnvClient
from roost.envs.protocol import TextAction

STEP_ACTION = "import pyautogui; pyautogui.moveTo(20, 20)"
BENCH_DOMAIN = "os"


@dataclass(frozen=True)
class DesktopBenchResult:
    env: str
    desktops: int
    """Episodes (each with its own desktop) open at once."""
    reset_ms_median: float
    step_ms_median: float
    rss_mb_per_desktop: float
    observation_type: str
    task_id: str


async def run_osworld_bench(config: BenchConfig, steps: int = 5) -> list[DesktopBenchResult]:
    env_args = (
        config.env_args
        if any(a.startswith("observation_type=") for a in config.env_args)
        else (*config.env_args, "observation_type=screenshot_a11y_tree")
    )
    config = BenchConfig(config.env, env_args, config.concurrency, config.seconds, config.workers, config.split)
    async with _server(config) as (url, process):
        async with EnvClient(url, timeout_s=300) as client:
            task_id = _bench_task(await client.tasks(config.split))
            baseline = _rss_mb(process.pid)
            observation = dict(a.split("=", 1) for a in env_args)["observation_type"]
            return [
                await _level(client, process.pid, task_id, n, steps, baseline, observation) for n in config.concurrency
            ]


def _bench_task(tasks: list) -> str:
    """A terminal task where there is one (the desktop itself, one light app), else the first."""
    return next((t.id for t in tasks if t.metadata.get("domain") == BENCH_DOMAIN), tasks[0].id)


async def _level(
    client: EnvClient, pid: int, task_id: str, n: int, steps: int, baseline: float, observation: str
) -> DesktopBenchResult:
    resets: list[float] = []
    step_times: list[float] = []

    async def open_one() -> str:
        started = time.perf_counter()
        episode_id, _ = await client.create(task_id=task_id)
        resets.append((time.perf_counter() - started) * 1000)
        return episode_id

    episodes = await asyncio.gather(*(open_one() for _ in range(n)))
    rss = max(0.0, _rss_mb(pid) - baseline) / n

    async def step_one(episode_id: str) -> None:
        for _ in range(steps):
            started = time.perf_counter()
            await client.step(episode_id, TextAction(STEP_ACTION))
            step_times.append((time.perf_counter() - started) * 1000)

    await asyncio.gather(*(step_one(e) for e in episodes))
    await asyncio.gather(*(client.delete(e) for e in episodes))
    return DesktopBenchResult(
        "osworld",
        n,
        round(statistics.median(resets), 1),
        round(statistics.median(step_times), 1),
        round(rss, 1),
        observation,
        task_id,
    )


def as_json(results: list[DesktopBenchResult]) -> list[dict]:
    return [asdict(r) for r in results]
