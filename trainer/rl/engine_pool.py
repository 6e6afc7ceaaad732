"""The run's engines: the replicas behind its gateway, kept serving the newest weights through
restarts, lost nodes and nodes that join.

    pool = EnginePool(replicas, launch, SyncTarget(...))
    pool.ensure_serving(echo)          # before a step's rollouts and before each weight update
    sync_weights(pool.url, folder, gateway_url=...)   # reaches every engine the gateway lists
    pool.loaded(folder, version)       # what a restarted or new replica must serve

A replica whose server process died is restarted by its actor (`ServiceActor`): one on the loop's
node reloads the newest weights from disk itself; one on another node cannot read them there, so
the pool sends them once it is back. A replica whose actor is gone (its node left the cluster)
is replaced: `launch` plans it again on the nodes alive now (waiting up to `join_timeout_s` for a
node that can hold it to join), the newest weights are sent to it before the gateway takes it in,
and the lost one is taken out. Its in-flight episodes end `infra_error` and are not trained on.
With `grow` (`placement.layout.engine.max_replicas`), a node that joins and holds none of the
run's replicas gets one more, sent the newest weights before the gateway takes it in
(`pool.grow(joined, echo)`, at a step's start).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .replicas import Grow, Launch, Replica, ReplicaPool, relaunch, restarts_of
from .services import ServiceError

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    from .services import ServiceActor


@dataclass(frozen=True)
class SyncTarget:
    """What sending weights to one engine needs."""

    engine_key: str | None
    gateway_url: str
    admin_key: str
    transport: str
    adapter: str | None = None


@dataclass(frozen=True)
class Weights:
    folder: str
    version: str
    adapter: str | None


class EnginePool(ReplicaPool):
    role = "engine"

    def __init__(
        self,
        replicas: list[Replica],
        launch: Launch,
        target: SyncTarget,
        join_timeout_s: float = 600.0,
        *,
        grow: Grow | None = None,
        most: int | None = None,
    ) -> None:
        """`grow` and `most`: the pool takes a node that joined for one more replica, up to `most`.
        `url` (the first replica's): a weight update starts there and reaches every engine the
        gateway lists."""
        super().__init__(replicas, grow, most)
        self._launch = launch
        self._target = target
        self.join_timeout_s = join_timeout_s
        self.newest: Weights | None = None

    def loaded(self, folder: str, version: int | str, adapter: str | None) -> None:
        """Every engine now serves these weights: a replica on this node reloads them after a restart."""
        import ray

        self.newest = weights = Weights(folder, str(version), adapter)
        ray.get([self._tell(r.actor, r.away, weights) for r in self.replicas if r.actor is not None])

    def _tell(self, actor: ActorHandle[ServiceActor], away: bool, weights: Weights) -> Any:
        """What the replica's actor must do after a restart: reload the newest weights (on this
        node), or take itself out of the gateway's rotation until they are sent (elsewhere)."""
        if away:
            return actor.serves_behind.remote(self._target.gateway_url, self._target.admin_key, weights.version)
        return actor.loaded.remote(weights.folder, weights.version, weights.adapter)

    def ensure_serving(self, echo: Callable[[str], None]) -> None:
        """Return once every replica serves the newest weights: restarted ones waited for (and sent
        the weights when on another node), lost ones replaced."""
        for i, replica in enumerate(self.replicas):
            actor = replica.actor
            if actor is None:
                continue
            restarts = restarts_of(actor)
            if restarts is None:
                self.replicas[i] = self._replace(replica, echo)
                continue
            if not _wait(actor, 0):
                echo(f"the engine at {replica.url} is down; waiting for its restart")
                if not _wait(actor, None):
                    raise ServiceError(
                        f"the engine at {replica.url} died and did not come back within its startup "
                        "timeout; see logs/engine.log in the run folder on its node (and logs/vllm.log for vLLM)"
                    )
                restarts = restarts_of(actor) or restarts
            if replica.away and restarts > replica.restarts:
                self._send(replica.url)  # its own reload cannot read the folder here
            replica.restarts = restarts

    def _replace(self, lost: Replica, echo: Callable[[str], None]) -> Replica:
        echo(f"engine {lost.index} at {lost.url} is lost (its node left the cluster); starting another")
        self.lose(lost)
        fresh = relaunch(self._launch, lost, self.join_timeout_s)
        self._bring_in(fresh, lost.url)
        self.replaced += 1
        echo(f"engine {lost.index} serves again at {fresh.url}")
        return fresh

    def _take(self, fresh: Replica) -> None:
        """Sent the newest weights before the gateway takes it in."""
        self._bring_in(fresh, None)
        self.replicas.append(fresh)

    def _bring_in(self, fresh: Replica, lost_url: str | None) -> None:
        """The newest weights into a new replica, then the gateway takes it (in place of `lost_url`)."""
        import ray

        if self.newest is not None and fresh.actor is not None:
            self._send(fresh.url)
            ray.get(self._tell(fresh.actor, fresh.away, self.newest))
        self._behind_gateway(fresh.url, lost_url)

    def _send(self, url: str) -> None:
        """The newest weights into the engine at `url` alone (no gateway pause: it takes no calls yet)."""
        from ..weight_sync import sync_adapter, sync_weights

        weights, target = self.newest, self._target
        if weights is None:
            return
        common: dict[str, Any] = dict(
            weight_version=weights.version, engine_key=target.engine_key, transport=target.transport
        )
        if weights.adapter is None:
            asyncio.run(sync_weights(url, weights.folder, **common))
        else:
            asyncio.run(sync_adapter(url, weights.folder, weights.adapter, **common))

    def _behind_gateway(self, fresh_url: str, lost_url: str | None) -> None:
        from roost.rollout.gateway.control.client import GatewayClient

        async def swap() -> None:
            async with GatewayClient(self._target.gateway_url, admin_key=self._target.admin_key) as gateway:
                await gateway.add_engine(fresh_url)
                if lost_url is None:
                    return
                for engine in (await gateway.engines()).engines:
                    if engine.url.rstrip("/") == lost_url.rstrip("/"):
                        await gateway.remove_engine(engine.engine_id)

        asyncio.run(swap())


def _wait(actor: ActorHandle[ServiceActor], timeout_s: float | None) -> bool:
    import ray

    return ray.get(actor.wait_serving.remote(timeout_s))
