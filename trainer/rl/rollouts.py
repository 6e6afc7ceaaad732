"""Which groups the trainer gets each step: played now (sync), streamed (async), or recovered.

    rollouts = Rollouts(recipe, workers, tasks, state, backlog)     # backlog: unfinished_backlog's
    group_ids, info = rollouts.next_groups(step)      # finished groups for this step
    results = rollouts.evaluate("after_sft", split_tasks, episodes, args)

sync: each step plays `groups_per_step` fresh groups on the current weights and waits.
async: workers keep `groups_per_step * (1 + max_staleness)` groups in flight; a step takes
the first `groups_per_step` that finish, and weights change under the rest (the gateway
pauses new calls for the swap). Either way, groups that finished in the store but were never
trained on (a crash between rollout and training) are used first after a resume; the gateway
names them (`GET /sessions`), the trainer does not open its store.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from roost.agents.results import EpisodeResult
from roost.envs.protocol import Task
from roost.outcome import EpisodeKind, EpisodeOutcome

from ..checkpoint import RunState
from ..recipe import Recipe
from .rollout_workers import GroupOutcome, GroupSpec

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    from roost.rollout.gateway.control.client import GatewayClient

    from .rollout_workers import RolloutWorker

EVAL_PREFIX = "eval"


@dataclass
class RolloutInfo:
    seconds: float
    results: list[EpisodeResult]
    recovered: int = 0


def task_pool(tasks: list[Task], max_tasks: int | None, seed: int) -> list[Task]:
    """The tasks RL draws from: all of the split's, or a seeded sample of `max_tasks` (in split order)."""
    if max_tasks is None or max_tasks >= len(tasks):
        return tasks
    return [tasks[i] for i in sorted(random.Random(seed).sample(range(len(tasks)), max_tasks))]


def pick(tasks: list[Task], index: int, seed: int) -> Task:
    """The task of the `index`-th group: the split's tasks in a seeded order, epoch after epoch."""
    epoch, offset = divmod(index, len(tasks))
    order = list(range(len(tasks)))
    random.Random(seed * 7919 + epoch).shuffle(order)
    return tasks[order[offset]]


async def unfinished_backlog(gateway: GatewayClient, consumed: set[str], group_size: int) -> list[str]:
    """Complete groups of training episodes the gateway recorded (all sessions finished) that were
    never trained on, read over its control plane (`GET /sessions`)."""
    groups: dict[str, list[EpisodeOutcome | None]] = {}
    for session in await gateway.sessions():
        gid = session.group_id or ""
        if gid not in consumed:
            groups.setdefault(gid, []).append(session.outcome)
    return [
        g
        for g, outcomes in groups.items()
        if len(outcomes) >= group_size and all(o is not None and o.kind is EpisodeKind.TRAIN for o in outcomes)
    ]


class Rollouts:
    def __init__(
        self,
        recipe: Recipe,
        workers: list[ActorHandle[RolloutWorker]],
        tasks: list[Task],
        state: RunState,
        backlog: list[str],
    ) -> None:
        self.recipe, self.workers, self.tasks, self.state = recipe, workers, tasks, state
        r = recipe.rollout
        self.per_step, self.size = r.groups_per_step, r.group_size
        self.backlog = backlog
        self.streaming = recipe.algorithm.mode == "async"
        self._ready: list[GroupOutcome] = []
        self._next_worker = 0
        # Group ids must not repeat across resumes (the store keeps every earlier group).
        self.launch = uuid.uuid4().hex[:6]

    def _specs(self, count: int) -> list[GroupSpec]:
        specs = []
        for _ in range(count):
            index = self.state.generated
            self.state.generated += 1
            specs.append(
                GroupSpec(f"{self.launch}-g{index}", pick(self.tasks, index, self.recipe.schedule.seed), self.size)
            )
        return specs

    def _spread(self, specs: list[GroupSpec]) -> list[list[GroupSpec]]:
        shares: list[list[GroupSpec]] = [[] for _ in self.workers]
        for spec in specs:
            shares[self._next_worker].append(spec)
            self._next_worker = (self._next_worker + 1) % len(self.workers)
        return shares

    def next_groups(self) -> tuple[list[str], RolloutInfo]:
        started = time.perf_counter()
        recovered, self.backlog = self.backlog[: self.per_step], self.backlog[self.per_step :]
        need = self.per_step - len(recovered)
        outcomes = self._stream(need) if self.streaming else self._play(need)
        info = RolloutInfo(time.perf_counter() - started, [r for o in outcomes for r in o.results], len(recovered))
        return recovered + [o.group_id for o in outcomes], info

    def _play(self, count: int) -> list[GroupOutcome]:
        import ray

        if count <= 0:
            return []
        refs = [w.play.remote(share) for w, share in zip(self.workers, self._spread(self._specs(count))) if share]
        return [o for outcomes in ray.get(refs) for o in outcomes]

    def _stream(self, count: int) -> list[GroupOutcome]:
        import ray

        if count <= 0:
            return []
        target = count * (1 + self.recipe.algorithm.max_staleness)
        in_flight = sum(ray.get([w.in_flight.remote() for w in self.workers])) + len(self._ready)
        for worker, share in zip(self.workers, self._spread(self._specs(max(0, target - in_flight)))):
            if share:
                ray.get(worker.stream.remote(share))
        while len(self._ready) < count:
            for outcomes in ray.get([w.finished.remote() for w in self.workers]):
                self._ready.extend(outcomes)
            if len(self._ready) < count:
                time.sleep(0.2)
        taken, self._ready = self._ready[:count], self._ready[count:]
        return taken

    def evaluate(
        self, label: str, tasks: list[Task], episodes: int, args: dict[str, Any] | None
    ) -> list[EpisodeResult]:
        """Play `episodes` held-out episodes (one per task, in turn) and return their results."""
        import ray

        specs = [
            GroupSpec(
                f"{EVAL_PREFIX}-{label}-{self.launch}-{i // len(tasks)}", tasks[i % len(tasks)], 1, EpisodeKind.EVAL
            )
            for i in range(episodes)
        ]
        refs = [w.play.remote(share, args) for w, share in zip(self.workers, self._spread(specs)) if share]
        return [r for outcomes in ray.get(refs) for o in outcomes for r in o.results]
