"""Rollout workers: Ray actors that play groups of episodes against the env server, with the
harness's model calls going through the gateway (so every token is recorded).

    worker = RolloutWorker.remote(env_url, gateway_url, recipe.agent.model_dump(), concurrency=8, admin_key=key)
    outcomes = ray.get(worker.play.remote([GroupSpec("step-3/t7", task, 4)]))   # sync: one step's groups
    worker.stream.remote(specs); ray.get(worker.finished.remote())                # async: never waits

A group is `size` episodes of one task, in the gateway group `GroupSpec.run_id/TASK_ID` (the
runner's naming). Each episode is cut off after `timeout_s` (labelled `timeout`); env and
engine faults are the runner's `infra_error`. Either way the session is finished without a
reward and the trainer leaves it out. With a judge (`use_judge`), each training episode's reward
is its verdict (`roost.agents.judge`); evaluations keep the env's, comparable with runs without one.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from roost.agents.episode_slots import EpisodeSlots
from roost.agents.protocol import Agent
from roost.agents.results import EpisodeResult
from roost.envs.protocol import Task
from roost.outcome import EpisodeKind
from roost.tracing import Tracing

if TYPE_CHECKING:
    from roost.agents.judge import Judge


@dataclass(frozen=True)
class GroupSpec:
    run_id: str
    task: Task
    size: int
    kind: EpisodeKind = EpisodeKind.TRAIN

    @property
    def group_id(self) -> str:
        return f"{self.run_id}/{self.task.id}"


@dataclass
class GroupOutcome:
    group_id: str
    results: list[EpisodeResult] = field(default_factory=list)
    seconds: float = 0.0


class RolloutWorker:
    """Plays groups of episodes; one asyncio loop, `concurrency` episodes at a time."""

    def __init__(
        self,
        env_url: str,
        gateway_url: str | None,
        agent: dict[str, Any],
        *,
        concurrency: int,
        follow_admission: bool = False,
        admin_key: str | None = None,
        agent_args: dict[str, Any] | None = None,
        invalid_action_penalty: float = 0.0,
        model: str | None = None,
    ) -> None:
        """`model`: the name the harnesses ask the gateway for (a LoRA run's adapter); None: the
        gateway's first model. `follow_admission`: `concurrency` is the most at once; fewer start
        while the gateway's admission has no room (`roost.agents.episode_slots`)."""
        self.model = model
        self.env_url, self.gateway_url, self.admin_key = env_url, gateway_url, admin_key
        self.invalid_action_penalty = invalid_action_penalty
        self.agent_config = agent
        self.concurrency = concurrency
        self.follow_admission = follow_admission
        self.default_args = agent_args
        self._limit: EpisodeSlots | None = None
        self._done: list[GroupOutcome] = []
        self._tasks: set[asyncio.Task] = set()
        self._agents: dict[str, Agent] = {}
        self._judge: tuple[str, str, dict[str, Any]] | None = None
        """(name, gateway URL, rubric) of the judge of training episodes; None: the env's rewards."""
        self.tracing = Tracing.start("runner")  # on with the OTEL_* variables the run hands its actors

    def _agent(self, args: dict[str, Any] | None) -> Agent:
        """The harness for these arguments, built once: a harness plays any number of episodes
        (concurrently too), and building one per group cost the worker time on every step."""
        from roost.agents.registry import load_agent

        kwargs = {**self.agent_config.get("args", {}), **(args if args is not None else self.default_args or {})}
        key = json.dumps(kwargs, sort_keys=True, default=str)
        if key not in self._agents:
            self._agents[key] = load_agent(self.agent_config["harness"], **kwargs)
        return self._agents[key]

    async def use_env(self, env_url: str) -> None:
        """Play later groups against this env server (one that replaced a lost one); groups in
        flight stay on theirs."""
        self.env_url = env_url

    async def use_judge(self, name: str, url: str, rubric: dict[str, Any]) -> None:
        """Reward later training groups by this judge's verdict (`roost.agents.judge.Rubric` fields),
        asked through its gateway at `url` (which takes this worker's admin key)."""
        self._judge = (name, url, rubric)

    def _new_judge(self, kind: EpisodeKind) -> Judge | None:
        """A judge for a group of this kind, with its own connections (closed with the group)."""
        if self._judge is None or kind is not EpisodeKind.TRAIN:
            return None
        from roost.agents.judge import Judge, Rubric
        from roost.rollout.gateway.control.client import GatewayClient

        name, url, rubric = self._judge
        gateway = GatewayClient(url, admin_key=self.admin_key, tracing=self.tracing)
        return Judge(name, Rubric.model_validate(rubric), gateway)

    async def play(self, specs: list[GroupSpec], args: dict[str, Any] | None = None) -> list[GroupOutcome]:
        """Play these groups now and return when all are done."""
        return list(await asyncio.gather(*(self._play_group(spec, args) for spec in specs)))

    async def stream(self, specs: list[GroupSpec], args: dict[str, Any] | None = None) -> int:
        """Start playing these groups in the background; collect them with `finished`."""
        for spec in specs:
            task = asyncio.create_task(self._play_group(spec, args))
            self._tasks.add(task)
            task.add_done_callback(self._collect)
        return len(self._tasks)

    def _collect(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is None:
            self._done.append(task.result())

    async def finished(self) -> list[GroupOutcome]:
        done, self._done = self._done, []
        return done

    async def in_flight(self) -> int:
        """Groups playing or finished and not yet collected: a group that finished since the last
        `finished` call still counts, else a step would launch more than it keeps in flight."""
        return len(self._tasks) + len(self._done)

    async def _play_group(self, spec: GroupSpec, args: dict[str, Any] | None) -> GroupOutcome:
        from roost.agents.runner import RunConfig, run_episode
        from roost.envs.client import EnvClient
        from roost.rollout.gateway.control.client import GatewayClient

        if self._limit is None:
            follow = self.follow_admission and self.gateway_url
            asker = GatewayClient(self.gateway_url, admin_key=self.admin_key) if follow else None
            self._limit = EpisodeSlots(self.concurrency, asker)
        agent = self._agent(args)
        config = RunConfig(
            concurrency=spec.size,
            max_turns=self.agent_config["max_turns"],
            model=self.model,
            run_id=spec.run_id,
            kind=spec.kind,
            timeout_s=self.agent_config["timeout_s"],
            progress=False,
            invalid_action_penalty=self.invalid_action_penalty,
            tracing=self.tracing,
        )
        started = time.perf_counter()
        async with EnvClient(self.env_url, tracing=self.tracing) as host:
            tools = (await host.info()).tools if self.agent_config.get("tools", True) else []
            gateway = (
                GatewayClient(self.gateway_url, admin_key=self.admin_key, tracing=self.tracing)
                if self.gateway_url
                else None
            )
            judge = self._new_judge(spec.kind)

            async def one() -> EpisodeResult:
                async with self._limit:
                    return await run_episode(spec.task, host, agent, tools, config, gateway, judge)

            try:
                results = await asyncio.gather(*(one() for _ in range(spec.size)))
            finally:
                if gateway is not None:
                    await gateway.aclose()
                if judge is not None:
                    await judge.aclose()
                await asyncio.to_thread(self.tracing.flush)  # the worker is killed at the end of the run
        return GroupOutcome(spec.group_id, list(results), time.perf_counter() - started)
