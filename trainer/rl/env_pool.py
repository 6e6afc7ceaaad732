"""The run's env servers: one or more replicas, each played against by its share of the rollout
workers (worker i, server i mod servers), kept serving through lost nodes.

    pool = EnvPool(replicas, launch)
    pool.assign(workers)            # worker i, started with pool.url_for(i)
    pool.ensure_serving(echo)       # before a step's rollouts

A server whose process died is restarted by its actor on its port (`ServiceActor`), and the
workers keep its URL. A replica whose actor is gone (its node left the cluster) is replaced:
`launch` plans it again on the nodes alive now, waiting up to `join_timeout_s` for a node that can
hold it to join, runs the env's `prepare` there, and the workers that played against the lost
one are pointed at the new one. Episodes in flight on the lost server end `infra_error` and are
not trained on. With `grow` (`placement.layout.env.max_replicas`), a node that joins and holds none
of the run's replicas gets one more server, and the workers are shared out again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .replicas import Grow, Launch, Replica, ReplicaPool, relaunch, restarts_of

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    from .rollout_workers import RolloutWorker


class EnvPool(ReplicaPool):
    role = "env server"

    def __init__(
        self,
        replicas: list[Replica],
        launch: Launch | None,
        join_timeout_s: float = 600.0,
        *,
        grow: Grow | None = None,
        most: int | None = None,
    ) -> None:
        """`launch` None: the servers are not the run's to replace (a server the recipe names).
        `grow` and `most`: the pool takes a node that joined for one more server, up to `most`."""
        super().__init__(replicas, grow, most)
        self._launch = launch
        self.join_timeout_s = join_timeout_s
        self._workers: list[ActorHandle[RolloutWorker]] = []

    def url_for(self, worker: int) -> str:
        return self.replicas[worker % len(self.replicas)].url

    def assign(self, workers: list[ActorHandle[RolloutWorker]]) -> None:
        """These workers play the run's episodes, worker i against server i mod servers (each
        started with `url_for(i)`); those of a lost server are pointed at its replacement."""
        self._workers = workers

    def ensure_serving(self, echo: Callable[[str], None]) -> None:
        """Return once every server's actor is alive: lost ones replaced, their workers re-pointed."""
        import ray

        for i, replica in enumerate(self.replicas):
            if replica.actor is None or self._launch is None or restarts_of(replica.actor) is not None:
                continue
            echo(f"env server {i} at {replica.url} is lost (its node left the cluster); starting another")
            self.lose(replica)
            self.replicas[i] = fresh = relaunch(self._launch, replica, self.join_timeout_s)
            self.replaced += 1
            mine = [w for j, w in enumerate(self._workers) if j % len(self.replicas) == i]
            ray.get([worker.use_env.remote(fresh.url) for worker in mine])
            echo(f"env server {i} serves again at {fresh.url}")

    def _take(self, fresh: Replica) -> None:
        """The workers that now play against another server (worker i, server i mod servers) are
        pointed at it (the env's `prepare` ran on its node as it started)."""
        import ray

        before = [self.url_for(j) for j in range(len(self._workers))]
        self.replicas.append(fresh)
        moved = [(w, self.url_for(j)) for j, w in enumerate(self._workers) if self.url_for(j) != before[j]]
        ray.get([worker.use_env.remote(url) for worker, url in moved])
