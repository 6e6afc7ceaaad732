"""`roost run`: episodes of a command harness (roost.agents.run_command), rewards resolved.

Per episode: a gateway session (when `base_url` is a roost gateway), an env episode, the
command; then the reward — the env's verdict when the episode ended, else the command's
reward file — is posted to the session, which is finished. Env faults and a failed gateway are
`infra_error` (no reward posted), as in the runner.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from typing import Any

from roost.agents.gateway_session import GatewayClient, GatewayError, recording_gateway
from roost.agents.protocol import AgentError, EpisodeContext, ModelUnavailable
from roost.agents.results import EpisodeStatus
from roost.agents.run_command import CommandAgent
from roost.envs.errors import EnvFaultError
from roost.envs.protocol import Action, Step, Task


@dataclass(frozen=True)
class CommandRunConfig:
    command: str
    env: str = "swe"
    env_url: str | None = None
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    admin_key: str | None = None
    """The gateway's admin key, when `base_url` is a roost gateway."""
    split: str = "test"
    task_ids: list[str] = field(default_factory=list)
    """Tasks to run (default: every task of the split)."""
    episodes: int | None = None
    """Cap on the number of episodes."""
    concurrency: int = 1
    timeout_s: float = 3600.0
    submit: bool = True
    """Submit for the command when it exits with the episode still open (envs with a `submit` tool)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None


@dataclass
class CommandResult:
    task_id: str
    status: EpisodeStatus = EpisodeStatus.OK
    reward: float | None = None
    reward_source: str = "none"
    """env | file | none"""
    exit_code: int | None = None
    session_id: str | None = None
    error: str | None = None
    output_tail: str = ""
    seconds: float = 0.0


async def run_command(config: CommandRunConfig) -> list[CommandResult]:
    agent = CommandAgent(command=config.command, timeout_s=config.timeout_s,
                         submit_tool="submit" if config.submit else None)
    gateway = await recording_gateway(config.base_url, config.admin_key)
    run_id = config.run_id or f"run-{uuid.uuid4().hex[:8]}"
    try:
        async with _host(config) as host:
            tasks = await host.tasks(config.split)
            if config.task_ids:
                known = {t.id: t for t in tasks}
                missing = [t for t in config.task_ids if t not in known]
                if missing:
                    raise ValueError(f"no task(s) {missing} in split {config.split!r} of {config.env}")
                tasks = [known[t] for t in config.task_ids]
            tasks = tasks[:config.episodes] if config.episodes else tasks
            limit = asyncio.Semaphore(config.concurrency)

            async def one(task: Task) -> CommandResult:
                async with limit:
                    return await _episode(task, host, agent, config, gateway, run_id)

            return list(await asyncio.gather(*(one(t) for t in tasks)))
    finally:
        if gateway is not None:
            await gateway.aclose()


async def _episode(task: Task, host, agent: CommandAgent, config: CommandRunConfig,
                   gateway: GatewayClient | None, run_id: str) -> CommandResult:
    result = CommandResult(task.id)
    started = time.perf_counter()
    session, episode_id = None, None
    try:
        if gateway is not None:
            session = await gateway.create_session(f"{run_id}/{task.id}", {"id": task.id, "split": task.split},
                                                   {"run_id": run_id, "agent": "command"})
            result.session_id = session.session_id
        episode_id, reset = await host.create(task_id=task.id, split=task.split)

        async def step(action: Action) -> Step:
            return await host.step(episode_id, action)

        ctx = EpisodeContext(task, reset, reset.tools, step, session.base_url if session else config.base_url,
                             session.key if session else config.api_key, config.model)
        outcome = await agent.run(ctx)
        extra = outcome.extra
        result.exit_code, result.output_tail = extra["exit_code"], extra["output_tail"]
        if extra["env_done"]:
            result.reward, result.reward_source = extra["env_reward"], "env"
        elif extra["file_reward"] is not None:
            result.reward, result.reward_source = extra["file_reward"], "file"
    except (EnvFaultError, ModelUnavailable, GatewayError) as exc:
        result.status, result.error = EpisodeStatus.INFRA_ERROR, f"{type(exc).__name__}: {exc}"
    except (AgentError, Exception) as exc:  # noqa: BLE001 - one broken episode must not stop the rest
        result.status, result.error = EpisodeStatus.AGENT_ERROR, f"{type(exc).__name__}: {exc}"
    finally:
        if episode_id is not None:
            with contextlib.suppress(Exception):
                await host.delete(episode_id)
    result.seconds = round(time.perf_counter() - started, 3)
    if gateway is not None and session is not None:
        await _report(gateway, session.session_id, result)
    return result


async def _report(gateway: GatewayClient, session_id: str, result: CommandResult) -> None:
    try:
        if result.status is EpisodeStatus.OK and result.reward is not None:
            await gateway.post_reward(session_id, result.reward, {"source": result.reward_source})
        await gateway.finish(session_id, result.status, task_id=result.task_id, reward=result.reward,
                             reward_source=result.reward_source, exit_code=result.exit_code, error=result.error)
    except GatewayError as exc:
        result.status, result.error = EpisodeStatus.INFRA_ERROR, str(exc)


@contextlib.asynccontextmanager
async def _host(config: CommandRunConfig) -> AsyncIterator[Any]:
    if config.env_url:
        from roost.envs.client import EnvClient

        async with EnvClient(config.env_url) as client:
            yield client
        return
    from roost.envs.episodes import EpisodeManager, ManagerConfig
    from roost.envs.worker import WorkerConfig

    manager = EpisodeManager(WorkerConfig(config.env, config.env_kwargs),
                             ManagerConfig(workers=max(1, min(config.concurrency, 4)),
                                           max_episodes=config.concurrency + 4))
    async with manager:
        yield manager


def results_json(results: list[CommandResult]) -> list[dict[str, Any]]:
    return [{**asdict(r), "status": r.status.value} for r in results]
