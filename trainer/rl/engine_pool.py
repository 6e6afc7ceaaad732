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
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .replicas import Launch, Replica, relaunch, restarts_of
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


class EnginePool:
    def __init__(
        self,
        replicas: list[Replica],
        launch: Launch,
        target: SyncTarget,
        join_timeout_s: float = 600.0,
    ) -> None:
        self.replicas = replicas
        self._launch = launch
        self._target = target
        self.join_timeout_s = join_timeout_s
        self.newest: Weights | None = None
        self.replaced = 0
        """Replicas started in place of lost ones."""

    @property
    def url(self) -> str:
        """The first replica's URL: a weight update starts there and reaches every engine the gateway lists."""
        return self.replicas[0].url

    def actors(self) -> list[ActorHandle[ServiceActor]]:
        return [r.actor for r in self.replicas if r.actor is not None]

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
        import ray

        echo(f"engine {lost.index} at {lost.url} is lost (its node left the cluster); starting another")
        fresh = relaunch(self._launch, lost, self.join_timeout_s)
        if self.newest is not None and fresh.actor is not None:
            self._send(fresh.url)
            ray.get(self._tell(fresh.actor, fresh.away, self.newest))
        self._swap_behind_gateway(lost.url, fresh.url)
        self.replaced += 1
        echo(f"engine {lost.index} serves again at {fresh.url}")
        return fresh

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

    def _swap_behind_gateway(self, lost_url: str, fresh_url: str) -> None:
        from roost.rollout.gateway.control.client import GatewayClient

        async def swap() -> None:
            async with GatewayClient(self._target.gateway_url, admin_key=self._target.admin_key) as gateway:
                await gateway.add_engine(fresh_url)
                for engine in (await gateway.engines()).engines:
                    if engine.url.rstrip("/") == lost_url.rstrip("/"):
                        await gateway.remove_engine(engine.engine_id)

        asyncio.run(swap())


def _wait(actor: ActorHandle[ServiceActor], timeout_s: float | None) -> bool:
    import ray

    return ray.get(actor.wait_serving.remote(timeout_s))
