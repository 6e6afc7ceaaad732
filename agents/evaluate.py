"""Evaluate an agent on an env: the Python API behind `roost eval` (and `roost run`, eval with
the command harness).

The env runs in this process's worker pool unless `env_url` names a running env
server. `base_url` is any OpenAI-compatible endpoint; when it is a roost gateway (with
its `admin_key`), every episode gets a gateway session (grouped as RUN_ID/TASK_ID) and its calls are
recorded as trajectories, with the episode's reward posted to the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from roost.agents.registry import load_agent
from roost.agents.results import EpisodeResult
from roost.agents.runner import EpisodeHost, RunConfig, run_episodes, summarize
from roost.envs.protocol import Task, ToolSchema
from roost.outcome import EpisodeKind
from roost.rollout.gateway.control.client import recording_gateway
from roost.tracing import Tracing


@dataclass(frozen=True)
class EvalConfig:
    env: str
    agent: str = "tool"
    env_url: str | None = None
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    admin_key: str | None = None
    """The gateway's admin key, when `base_url` is a roost gateway."""
    episodes: int | None = 10
    """Episodes to play, the tasks in turn; None: each task once."""
    split: str = "train"
    concurrency: int = RunConfig.concurrency  # the runner's defaults, one place (its RunConfig)
    follow_admission: bool = RunConfig.follow_admission
    """`concurrency` is the most at once; fewer start while the gateway's admission has no room."""
    max_turns: int = RunConfig.max_turns
    timeout_s: float | None = RunConfig.timeout_s
    """Each episode's harness is cut off after this many seconds (status `timeout`); None: no limit."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    agent_kwargs: dict[str, Any] = field(default_factory=dict)
    workers: int = 2
    run_id: str | None = None
    progress: bool = True
    task_ids: tuple[str, ...] = ()
    """Play these tasks (cycled) instead of the split's tasks in order."""
    trace: bool = False
    """A trace per episode (`roost.tracing`; also on with the OTEL_* variables)."""


@dataclass(frozen=True)
class Evaluation:
    """What `play` played: each episode's result, and how."""

    config: EvalConfig
    agent: str
    run_id: str
    recorded: bool
    """A roost gateway recorded the episodes."""
    results: list[EpisodeResult]
    seconds: float

    def report(self) -> dict[str, Any]:
        """The summary and per-episode results, as `roost eval --json` prints them."""
        return {
            "env": self.config.env,
            "agent": self.agent,
            "split": self.config.split,
            **summarize(self.results),
            "recorded": self.recorded,
            "run_id": self.run_id,
            "seconds": self.seconds,
            "results": [r.to_json() for r in self.results],
        }


async def evaluate(config: EvalConfig) -> dict[str, Any]:
    """Play the episodes and report them (`Evaluation.report`)."""
    return (await play(config)).report()


async def play(config: EvalConfig) -> Evaluation:
    agent = load_agent(config.agent, **config.agent_kwargs)
    if agent.needs_model and not config.base_url:
        raise ValueError(
            f"agent {agent.name!r} needs a model: pass --base-url (an OpenAI-compatible endpoint or a roost gateway)"
        )
    tracing = Tracing.start("runner", flag=config.trace)
    gateway = await recording_gateway(config.base_url, config.admin_key, tracing)
    run = RunConfig(
        concurrency=config.concurrency,
        follow_admission=config.follow_admission and gateway is not None,
        max_turns=config.max_turns,
        model=config.model,
        base_url=None if gateway else config.base_url,
        api_key=config.api_key,
        run_id=config.run_id or f"eval-{uuid.uuid4().hex[:8]}",
        kind=EpisodeKind.EVAL,
        timeout_s=config.timeout_s,
        progress=config.progress,
        tracing=tracing,
    )
    started = time.perf_counter()
    try:
        async with _episode_host(config, tracing) as (host, tools):
            tasks = _episode_tasks(config, await host.tasks(config.split))
            results = await run_episodes(tasks, host, agent, tools, run, gateway)
    finally:
        if gateway is not None:
            await gateway.aclose()
        await asyncio.to_thread(tracing.shutdown)
    return Evaluation(
        config, agent.name, run.run_id, gateway is not None, results, round(time.perf_counter() - started, 2)
    )


def _episode_tasks(config: EvalConfig, available: list[Task]) -> list[Task]:
    """The task of each episode: the split's (or `task_ids`), in turn."""
    if config.task_ids:
        by_id = {t.id: t for t in available}
        missing = [t for t in config.task_ids if t not in by_id]
        if missing:
            raise ValueError(f"no task {missing[0]!r} in split {config.split!r} of {config.env}")
        available = [by_id[t] for t in config.task_ids]
    if not available:
        raise ValueError(f"split {config.split!r} of {config.env} has no tasks")
    episodes = len(available) if config.episodes is None else config.episodes
    return [available[i % len(available)] for i in range(episodes)]


@contextlib.asynccontextmanager
async def _episode_host(config: EvalConfig, tracing: Tracing) -> AsyncIterator[tuple[EpisodeHost, list[ToolSchema]]]:
    if config.env_url:
        from roost.envs.client import EnvClient

        async with EnvClient(config.env_url, tracing=tracing) as client:
            yield client, (await client.info()).tools
        return
    from roost.envs.episodes import EpisodeManager, ManagerConfig
    from roost.envs.worker import WorkerConfig

    workers = max(1, min(config.workers, config.concurrency))
    manager = EpisodeManager(
        WorkerConfig(config.env, config.env_kwargs), ManagerConfig(workers=workers, max_episodes=config.concurrency + 4)
    )
    async with manager:
        yield manager, manager.info.tools
