"""Episodes of one env server: leases, capacity, and the workers that host them.

An episode holds a slot from creation until it terminates, is truncated, fails, is
deleted or is reaped (idle past its lease). Past `max_episodes` live episodes,
`create` raises `CapacityError`. An env fault or a lost worker ends the episode as
`failed` and frees its slot; its next request raises `EnvFaultError` again, so the
runner sees the fault however it looks.

The pool heals: a worker that died or went silent is replaced whenever that is noticed
(on each create and step, and every `check_interval_s`), and `capacity` says how many
workers serve while a replacement loads.

The HTTP server is a thin layer over this class; `roost eval` without `--env-url`
uses it directly.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from pydantic import ConfigDict

from roost.envs.errors import (
    CapacityError,
    EnvFaultError,
    EpisodeFinishedError,
    EpisodeNotFoundError,
    InvalidActionError,
)
from roost.envs.metrics import EnvMetrics
from roost.envs.protocol import Action, EnvInfo, Reset, Step, Task, check_action
from roost.envs.worker import WorkerConfig, WorkerCrashed, WorkerHandle
from roost.metrics_http import Reading

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ManagerConfig:
    __pydantic_config__ = ConfigDict(extra="forbid")  # read from `--config FILE` (`roost.envs.serve`)

    workers: int = 2
    """Worker processes; env code is CPU-bound, so about one per core."""
    max_episodes: int = 64
    """Live episodes at once; one more is refused with 429 and `Retry-After`."""
    lease_s: float = 600.0
    """An episode idle this long is reaped and its resources freed."""
    keep_ended: int = 10_000
    """Ended episodes remembered, so late requests get a clear answer."""
    check_interval_s: float = 2.0
    """How often workers are checked for death and silence when no request looks."""


@dataclass
class EpisodeRecord:
    id: str
    task_id: str
    worker: WorkerHandle | None
    state: str = "running"
    steps: int = 0
    total_reward: float = 0.0
    created_at: float = field(default_factory=time.time)
    last_active_at: float = field(default_factory=time.time)
    error: str | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class EpisodeManager:
    def __init__(
        self, worker_config: WorkerConfig, config: ManagerConfig = ManagerConfig(), metrics: EnvMetrics | None = None
    ) -> None:
        self.worker_config = worker_config
        self.config = config
        self.metrics = metrics or EnvMetrics()
        self.metrics.read_at_scrape(self._readings())
        self.workers: list[WorkerHandle] = []
        self.episodes: OrderedDict[str, EpisodeRecord] = OrderedDict()
        self._info: EnvInfo | None = None
        self._reserved = 0
        self._chores: list[asyncio.Task] = []
        self._loading: set[asyncio.Task] = set()

    @property
    def info(self) -> EnvInfo:
        if self._info is None:
            raise RuntimeError("EpisodeManager.start() has not finished")
        return self._info

    @property
    def live(self) -> int:
        return self._reserved

    @property
    def started(self) -> bool:
        return self._info is not None

    async def start(self) -> None:
        """Start the workers and wait until each has loaded the env (idempotent)."""
        if self.started:
            return
        self.workers = [WorkerHandle(self.worker_config, i) for i in range(self.config.workers)]
        try:
            infos = await asyncio.gather(*(w.ready() for w in self.workers))
        except BaseException:
            await self.stop()
            raise
        self._info = infos[0]
        reap_every = max(0.05, min(self.config.lease_s / 4, 5.0))
        self._chores = [
            asyncio.create_task(self._every(reap_every, self._reap_idle, "reaping idle episodes")),
            asyncio.create_task(self._every(self.config.check_interval_s, self._heal, "checking the workers")),
        ]

    async def stop(self) -> None:
        for task in [*self._chores, *self._loading]:
            task.cancel()
        self._chores = []
        await asyncio.gather(*(asyncio.to_thread(worker.stop) for worker in self.workers))
        self._info = None

    async def __aenter__(self) -> EpisodeManager:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def tasks(self, split: str) -> list[Task]:
        worker = self._pick_worker()
        try:
            return await worker.call("tasks", payload=split)
        except WorkerCrashed as exc:
            await self._replace(worker, str(exc))
            raise

    async def create(
        self,
        *,
        task_id: str | None = None,
        seed: int | None = None,
        split: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[str, Reset]:
        await self._heal()
        if self._reserved >= self.config.max_episodes:
            self.metrics.capacity_rejections.inc()
            raise CapacityError(
                f"all {self.config.max_episodes} episode slots are in use; retry shortly", retry_after=1.0
            )
        self._reserved += 1
        worker = self._pick_worker()
        record = EpisodeRecord(uuid.uuid4().hex, task_id or "", worker)
        worker.episodes.add(record.id)
        self.episodes[record.id] = record
        started = time.perf_counter()
        try:
            async with record.lock:
                reset = await self._call(
                    record, "reset", dict(task_id=task_id, seed=seed, split=split, options=options)
                )
        except BaseException:
            self._end(record, "closed" if record.state == "running" else record.state)
            self.episodes.pop(record.id, None)
            raise
        self.metrics.op_seconds.labels("reset").observe(time.perf_counter() - started)
        self.metrics.episodes_started.inc()
        record.task_id = reset.task_id
        return record.id, reset

    async def step(self, episode_id: str, action: Action) -> Step:
        record = self.get(episode_id)
        await self._heal()
        async with record.lock:
            self._check_running(record)
            started = time.perf_counter()
            try:
                check_action(action)
                step = await self._call(record, "step", action)
            except InvalidActionError:
                self._invalid(record)
                raise
            self.metrics.op_seconds.labels("step").observe(time.perf_counter() - started)
            self.metrics.steps.inc()
            record.steps += 1
            record.total_reward += step.reward
            record.last_active_at = time.time()
            if step.terminated or step.truncated:
                await self._close(record, "terminated" if step.terminated else "truncated")
            return step

    async def workspace(self, episode_id: str) -> bytes:
        """The running episode's working tree, a gzip'd tar (`HasWorkspace`); renews its lease."""
        record = self.get(episode_id)
        async with record.lock:
            self._check_running(record)
            archive = await self._call(record, "workspace", None)
            record.last_active_at = time.time()
            return archive

    async def refuse(self, episode_id: str, error: InvalidActionError) -> NoReturn:
        """Answer an action that could not even be read (past `roost.serving.json_bounds`) as an invalid
        one: counted, the episode's lease renewed, the episode unchanged."""
        record = self.get(episode_id)
        async with record.lock:
            self._check_running(record)
            self._invalid(record)
        raise error

    def _invalid(self, record: EpisodeRecord) -> None:
        self.metrics.invalid_actions.inc()
        record.last_active_at = time.time()

    def get(self, episode_id: str) -> EpisodeRecord:
        record = self.episodes.get(episode_id)
        if record is None:
            raise EpisodeNotFoundError(f"no episode {episode_id!r} (never created, or forgotten long ago)")
        return record

    async def delete(self, episode_id: str) -> EpisodeRecord:
        record = self.get(episode_id)
        async with record.lock:
            if record.state == "running":
                await self._close(record, "closed")
        return record

    def lease_expires_at(self, record: EpisodeRecord) -> float | None:
        return record.last_active_at + self.config.lease_s if record.state == "running" else None

    def capacity(self) -> tuple[int, int]:
        """(workers serving, workers wanted): fewer while a replacement loads its env."""
        return sum(w.serving for w in self.workers), self.config.workers

    def _readings(self) -> list[Reading]:
        return [
            Reading("roost_env_live_episodes", "Episodes running", lambda: self.live),
            Reading("roost_env_max_episodes", "Live episodes before 429", lambda: self.config.max_episodes),
            Reading("roost_env_workers_alive", "Env workers serving", lambda: self.capacity()[0]),
            Reading("roost_env_workers_wanted", "Env workers configured", lambda: self.config.workers),
        ]

    def _pick_worker(self) -> WorkerHandle:
        alive = [w for w in self.workers if w.alive] or self.workers
        return min(alive, key=lambda w: len(w.episodes))

    def _check_running(self, record: EpisodeRecord) -> None:
        if record.state == "failed":
            raise EnvFaultError(f"episode {record.id} failed: {record.error}")
        if record.state == "reaped":
            raise EpisodeNotFoundError(
                f"episode {record.id} was reaped after {self.config.lease_s:.0f}s idle; start a new one"
            )
        if record.state != "running":
            raise EpisodeFinishedError(f"episode {record.id} is {record.state}; start a new one")

    async def _call(self, record: EpisodeRecord, op: str, payload: Any) -> Any:
        worker = record.worker
        if worker is None:
            raise EnvFaultError(f"episode {record.id} has no worker")
        try:
            return await worker.call(op, record.id, payload)
        except WorkerCrashed as exc:
            await self._replace(worker, str(exc))
            raise
        except EnvFaultError as exc:
            self.metrics.errors.labels("env_error").inc()
            record.error = str(exc)
            await self._close(record, "failed")
            raise

    async def _close(self, record: EpisodeRecord, state: str) -> None:
        worker = record.worker
        self._end(record, state)
        if worker is not None and worker.alive:
            try:
                await worker.call("close", record.id)
            except WorkerCrashed as exc:
                await self._replace(worker, str(exc))

    def _end(self, record: EpisodeRecord, state: str) -> None:
        if record.state == "running":
            self._reserved -= 1
            self.metrics.episodes_ended.labels(state).inc()
        record.state = state
        if record.worker is not None:
            record.worker.episodes.discard(record.id)
        record.worker = None
        while len(self.episodes) > self.config.keep_ended + self.config.max_episodes:
            oldest = next(iter(self.episodes.values()))
            if oldest.state == "running":
                break
            self.episodes.popitem(last=False)

    async def _heal(self) -> None:
        """Replace every worker that died or went silent."""
        for worker in list(self.workers):
            reason = worker.fault() if worker in self.workers else None
            if reason is not None:
                await self._replace(worker, reason)

    async def _replace(self, worker: WorkerHandle, reason: str) -> None:
        # The swap comes first, so that nothing picks the old worker or replaces it twice;
        # the fresh one loads its env in the background (calls to it wait for that).
        if worker not in self.workers:
            return
        fresh = WorkerHandle(self.worker_config, worker.index)
        self.workers[self.workers.index(worker)] = fresh
        log.warning("replacing a worker: %s", reason)
        self.metrics.worker_restarts.inc()
        self.metrics.errors.labels("worker_crashed").inc()
        for episode_id in list(worker.episodes):
            record = self.episodes[episode_id]
            record.error = reason
            self._end(record, "failed")
        loading = asyncio.create_task(self._load(fresh))
        self._loading.add(loading)
        loading.add_done_callback(self._loading.discard)
        await asyncio.to_thread(worker.stop, reason)

    async def _load(self, worker: WorkerHandle) -> None:
        try:
            await worker.ready()
        except Exception as exc:  # noqa: BLE001 - it dies; the next check replaces it again
            log.warning("a replacement env worker failed to start: %s", exc)

    async def _every(self, interval_s: float, chore: Callable[[], Awaitable[None]], what: str) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await chore()
            except Exception:  # noqa: BLE001 - a chore must outlive any one failure
                log.exception("%s failed; trying again in %.1fs", what, interval_s)

    async def _reap_idle(self) -> None:
        deadline = time.time() - self.config.lease_s
        for record in list(self.episodes.values()):
            if record.state != "running" or record.last_active_at >= deadline or record.lock.locked():
                continue
            async with record.lock:
                if record.state == "running" and record.last_active_at < deadline:
                    self.metrics.reaped.inc()
                    await self._close(record, "reaped")
