"""The episode runner: task → gateway session → env episode → harness → reward → finish.

    results = await run_episodes(tasks, host, agent, tools, RunConfig(concurrency=8), gateway)
    summary = summarize(results)

Per episode: open a gateway session in the task's group (when a gateway is given),
start the env episode, run the harness with `base_url` = the session URL, post the
reward and finish the session. The reward is the sum of the env's step rewards, except
for an episode the env did not end whose harness reports its own (a command's reward
file): then the harness's, or none (`RewardSource`). An environment fault (env 5xx, a lost env
worker or server, an episode the env server no longer knows because it restarted) or a
failed model endpoint ends the episode as `infra_error`, a harness that raises `AgentError` with
that error's status (`agent_error`, or `timeout` for a harness cut off): no reward is posted and
it is left out of the success rate — never scored 0. With a `Judge` (`roost.agents.judge`), each
episode that ended `ok` is judged after the env episode is gone: its reward is the judge's verdict
(or the env's plus it), source `judge`; a judge that gave no verdict makes it `infra_error` too.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from roost.agents.episode_slots import EpisodeSlots
from roost.agents.judge import Judge, JudgedEpisode, JudgeError
from roost.agents.protocol import Agent, AgentError, AgentOutcome, EpisodeContext, HarnessTimeout, ModelUnavailable
from roost.agents.results import EpisodeResult
from roost.envs.errors import CapacityError, EnvFaultError, EpisodeFinishedError, EpisodeNotFoundError
from roost.envs.protocol import Action, Reset, Step, Task, ToolSchema
from roost.outcome import EpisodeKind, EpisodeStatus, RewardSource
from roost.rollout.gateway.control.client import ControlPlaneError, GatewayClient
from roost.rollout.gateway.control.wire import SessionCreated
from roost.tracing import Tracing

log = logging.getLogger(__name__)


class EpisodeHost(Protocol):
    """Where episodes run: `roost.envs.client.EnvClient` (a server) or `EpisodeManager` (in-process)."""

    async def create(
        self,
        *,
        task_id: str | None = None,
        seed: int | None = None,
        split: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[str, Reset]: ...

    async def step(self, episode_id: str, action: Action) -> Step: ...

    async def delete(self, episode_id: str) -> Any: ...

    async def tasks(self, split: str) -> list[Task]: ...

    async def workspace(self, episode_id: str) -> bytes: ...


@dataclass(frozen=True)
class RunConfig:
    concurrency: int = 8
    """Episodes at once; with `follow_admission`, the most at once."""
    follow_admission: bool = False
    """Start episodes only while the gateway's program-aware admission has room for them
    (`roost.agents.episode_slots`): concurrency need not be tuned to the engines by hand."""
    max_turns: int = 50
    model: str | None = None
    base_url: str | None = None
    """OpenAI-compatible endpoint for harnesses when no gateway records the episode."""
    api_key: str | None = None
    run_id: str = field(default_factory=lambda: f"run-{uuid.uuid4().hex[:8]}")
    kind: EpisodeKind = EpisodeKind.TRAIN
    """What the episodes are played for, stored in each session's outcome: only `train` ones become RL batches."""
    timeout_s: float | None = 600.0
    """Each episode's harness is cut off after this many seconds (status `timeout`, no reward); None: no limit."""
    progress: bool = True
    capacity_wait_s: float = 300.0
    """How long to keep retrying while the env server is full (429)."""
    invalid_action_penalty: float = 0.0
    """Taken off the training reward per invalid action (verl-agent's
    `invalid_action_penalty_coef`): episodes that all fail still differ. Posted as a step
    reward on the call that chose the action where the harness says which (`AgentOutcome.
    invalid_calls`), else off the episode's reward. The env reward, success and the session's
    finish info stay as the env gave them."""
    tracing: Tracing = field(default_factory=Tracing, compare=False, repr=False)
    """A span per episode (`roost.tracing`; off by default), the parent of the gateway session's calls."""


class _Tracker:
    """Binds `step` to one env episode and keeps the reward and end state."""

    def __init__(self, host: EpisodeHost, episode_id: str) -> None:
        self.host, self.episode_id = host, episode_id
        self.reward, self.steps, self.terminated, self.done = 0.0, 0, False, False

    async def step(self, action: Action) -> Step:
        if self.done:
            raise EpisodeFinishedError(f"episode {self.episode_id} has ended")
        step = await self.host.step(self.episode_id, action)
        self.steps += 1
        self.reward += step.reward
        self.terminated, self.done = step.terminated, step.done
        return step

    async def workspace(self) -> bytes:
        return await self.host.workspace(self.episode_id)


async def run_episode(
    task: Task,
    host: EpisodeHost,
    agent: Agent,
    tools: list[ToolSchema],
    config: RunConfig,
    gateway: GatewayClient | None = None,
    judge: Judge | None = None,
) -> EpisodeResult:
    """One episode, in an `episode` span: a child of the current span if any, else a trace's root.
    `judge`: the episode's reward is its verdict on the transcript `gateway` recorded."""
    if judge is not None and gateway is None:
        raise ValueError("a judge reads the episode's transcript from the gateway that records it: pass the gateway")
    attributes = {
        "roost.task_id": task.id,
        "roost.split": task.split,
        "roost.run_id": config.run_id,
        "roost.agent": agent.name,
    }
    with config.tracing.span("episode", attributes) as span:
        result = await _run_episode(task, host, agent, tools, config, gateway, judge)
        if span is not None:
            ended = {
                "roost.status": result.status.value,
                "roost.session_id": result.session_id,
                "roost.reward": result.reward,
                "roost.steps": result.steps,
            }
            span.set_attributes({k: v for k, v in ended.items() if v is not None})
    return result


async def _run_episode(
    task: Task,
    host: EpisodeHost,
    agent: Agent,
    tools: list[ToolSchema],
    config: RunConfig,
    gateway: GatewayClient | None,
    judge: Judge | None,
) -> EpisodeResult:
    started = time.perf_counter()
    session: SessionCreated | None = None
    episode_id: str | None = None
    invalid_calls: list[int] = []
    try:
        if gateway is not None:
            session = await gateway.create_session(
                f"{config.run_id}/{task.id}",
                _task_meta(task),
                {"run_id": config.run_id, "agent": agent.name},
                traceparent=config.tracing.current().traceparent,
            )
        episode_id, reset = await _create(host, task, agent, config)
        tracker = _Tracker(host, episode_id)
        ctx = EpisodeContext(
            task,
            reset,
            tools,
            tracker.step,
            session.base_url if session else config.base_url,
            session.key if session else config.api_key,
            config.model,
            config.max_turns,
            tracker.workspace,
        )
        outcome = await _played(agent, ctx, config.timeout_s)
        invalid_calls = outcome.invalid_calls
        reward, source = _reward(tracker, outcome)
        result = EpisodeResult(
            task.id,
            task.split,
            reward=reward,
            reward_source=source,
            steps=tracker.steps,
            success=tracker.terminated and tracker.reward > 0,
            turns=outcome.turns,
            invalid_actions=outcome.invalid_actions,
            stop_reason=outcome.stop_reason,
            error=outcome.error,
            exit_code=outcome.exit_code,
            output_tail=outcome.output_tail,
        )
    except (EnvFaultError, EpisodeNotFoundError, ModelUnavailable, ControlPlaneError) as exc:
        result = _failed(task, EpisodeStatus.INFRA_ERROR, exc)
    except AgentError as exc:
        result = _failed(task, exc.status, exc)
    except Exception as exc:  # noqa: BLE001 - a harness bug must not stop the other episodes
        log.exception("agent %s crashed on %s", agent.name, task.id)
        result = _failed(task, EpisodeStatus.AGENT_ERROR, exc)
    finally:
        if episode_id is not None:
            await _quietly(host.delete(episode_id))
    if judge is not None and gateway is not None and session is not None and result.scored:
        result = await _judged(
            judge, gateway, JudgedEpisode(session.session_id, task, result.reward, result.success), result, config
        )
    result = replace(
        result, session_id=session.session_id if session else None, seconds=round(time.perf_counter() - started, 3)
    )
    if gateway is not None and session is not None:
        with config.tracing.span("episode.report", {"roost.session_id": session.session_id}):
            result = await _report(gateway, session, result, config, invalid_calls)
    return result


async def _played(agent: Agent, ctx: EpisodeContext, timeout_s: float | None) -> AgentOutcome:
    try:
        async with asyncio.timeout(timeout_s) as limit:
            return await agent.run(ctx)
    except TimeoutError:
        if not limit.expired():  # the harness's own timeout, not the episode's: its error
            raise
        raise HarnessTimeout(f"the {agent.name} harness ran past its {timeout_s:.0f}s timeout") from None


def _reward(tracker: _Tracker, outcome: AgentOutcome) -> tuple[float | None, RewardSource]:
    """The env's rewards when it ended the episode or the harness reports none of its own; else
    the harness's (a command's reward file), or none when it gave none."""
    if tracker.done or outcome.reward_source is RewardSource.ENV:
        return tracker.reward, RewardSource.ENV
    if outcome.reward is None:
        return None, RewardSource.NONE
    return outcome.reward, RewardSource.FILE


async def _judged(
    judge: Judge, gateway: GatewayClient, episode: JudgedEpisode, result: EpisodeResult, config: RunConfig
) -> EpisodeResult:
    """The result with the judge's reward, or `infra_error` when no verdict came."""
    try:
        with config.tracing.span("episode.judge", {"roost.session_id": episode.session_id, "roost.judge": judge.name}):
            verdict = await judge.verdict(episode, gateway, config.run_id)
    except JudgeError as exc:
        log.warning("no verdict on %s: %s", episode.task.id, exc)
        return replace(result, status=EpisodeStatus.INFRA_ERROR, error=str(exc), judge_session_id=exc.session_id)
    return replace(
        result,
        reward=judge.rubric.combine(result.reward, verdict.reward),
        reward_source=RewardSource.JUDGE,
        env_reward=result.reward,
        judge_session_id=verdict.session_id,
    )


def _failed(task: Task, status: EpisodeStatus, exc: Exception) -> EpisodeResult:
    return EpisodeResult(task.id, task.split, status, error=f"{type(exc).__name__}: {exc}")


async def run_episodes(
    tasks: list[Task],
    host: EpisodeHost,
    agent: Agent,
    tools: list[ToolSchema],
    config: RunConfig,
    gateway: GatewayClient | None = None,
    judge: Judge | None = None,
) -> list[EpisodeResult]:
    """Run all tasks, `config.concurrency` at a time (fewer while the gateway's admission has no
    room, with `config.follow_admission`), with a progress bar on stderr; `judge` as `run_episode`'s."""
    from tqdm.auto import tqdm

    limit = EpisodeSlots(config.concurrency, gateway if config.follow_admission else None)
    bar = tqdm(total=len(tasks), desc=f"{agent.name}", unit="ep", disable=not config.progress, leave=False)
    wins = 0

    async def one(task: Task) -> EpisodeResult:
        nonlocal wins
        async with limit:
            result = await run_episode(task, host, agent, tools, config, gateway, judge)
        wins += result.success
        bar.update(1)
        bar.set_postfix(success=f"{wins}/{bar.n}")
        return result

    try:
        return list(await asyncio.gather(*(one(t) for t in tasks)))
    finally:
        bar.close()


def summarize(results: list[EpisodeResult]) -> dict[str, Any]:
    scored = [r for r in results if r.scored]
    rewards = [r.reward for r in scored if r.reward is not None]
    return {
        "episodes": len(results),
        "scored": len(scored),
        "success_rate": round(sum(r.success for r in scored) / len(scored), 4) if scored else None,
        "mean_reward": round(sum(rewards) / len(rewards), 4) if rewards else None,
        "mean_steps": round(sum(r.steps for r in scored) / len(scored), 2) if scored else None,
        "infra_errors": sum(r.status is EpisodeStatus.INFRA_ERROR for r in results),
        "agent_errors": sum(r.status is EpisodeStatus.AGENT_ERROR for r in results),
    }


def _task_meta(task: Task) -> dict[str, Any]:
    return {"id": task.id, "split": task.split, **task.metadata}


async def _create(host: EpisodeHost, task: Task, agent: Agent, config: RunConfig) -> tuple[str, Reset]:
    deadline = time.monotonic() + config.capacity_wait_s
    while True:
        try:
            return await host.create(task_id=task.id, split=task.split, options=dict(agent.reset_options))
        except CapacityError as exc:
            if time.monotonic() + exc.retry_after > deadline:
                raise EnvFaultError(f"env server stayed full for {config.capacity_wait_s:.0f}s: {exc}") from exc
            await asyncio.sleep(exc.retry_after)


async def _report(
    gateway: GatewayClient, session: SessionCreated, result: EpisodeResult, config: RunConfig, invalid_calls: list[int]
) -> EpisodeResult:
    """Post the episode's reward (when scored) and finish its session; a gateway that fails
    makes a scored episode `infra_error` (its reward never reached the store)."""
    penalty = config.invalid_action_penalty
    try:
        if result.scored and result.reward is not None:
            placed = await _penalise_calls(gateway, session, result, penalty, invalid_calls) if penalty else 0
            shaped = result.reward - penalty * (result.invalid_actions - placed)
            judged = result.reward_source is RewardSource.JUDGE
            info = {
                "success": result.success,
                "env_reward": result.env_reward if judged else result.reward,
                "invalid_actions": result.invalid_actions,
                "source": result.reward_source.value,
            }
            if judged:  # the verdict itself is the judge session's outcome
                info["judge_session"] = result.judge_session_id
            await gateway.post_reward(session.session_id, shaped, info)
        # an unscored episode (infra_error, timeout, agent_error) has no reward: none is stored
        await gateway.finish(
            session.session_id,
            result.outcome(config.kind),
            task_id=result.task_id,
            steps=result.steps,
            stop_reason=result.stop_reason,
            exit_code=result.exit_code,
        )
    except ControlPlaneError as exc:
        log.warning("could not report episode %s to the gateway: %s", result.task_id, exc)
        if result.scored:
            return replace(result, status=EpisodeStatus.INFRA_ERROR, error=str(exc))
    return result


async def _penalise_calls(
    gateway: GatewayClient, session: SessionCreated, result: EpisodeResult, penalty: float, invalid_calls: list[int]
) -> int:
    """Post the penalty of each invalid action on the call that chose it; returns how many were
    placed. Only when the session holds exactly one call per turn (else which call chose what
    is unknown, and the penalty stays on the episode)."""
    if not invalid_calls:
        return 0
    call_ids = await gateway.call_ids(session.session_id)
    if len(call_ids) != result.turns or not all(0 <= i < len(call_ids) for i in invalid_calls):
        return 0
    for index, count in sorted(Counter(invalid_calls).items()):
        await gateway.post_reward(
            session.session_id, -penalty * count, {"invalid_actions": count}, call_id=call_ids[index]
        )
    return len(invalid_calls)


async def _quietly(coro) -> None:
    try:
        await coro
    except Exception as exc:  # noqa: BLE001 - cleanup of an episode that may already be gone
        log.debug("episode cleanup: %s", exc)
