"""One replica of a run's service role (an engine, an env server), and what every pool of them
does when one is lost: notice that its actor is gone, and start another where the nodes alive
now can hold it, waiting for one to join.

    replica = Replica(0, url, actor, away=True, node=node_id)
    restarts_of(replica.actor)                  # None: the actor is gone (its node left)
    fresh = relaunch(launch, replica, 600.0)    # launch(index, avoid) plans and starts it again
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..layout import LayoutError, Node, nodes_from_ray
from .services import ServiceError

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    from .services import ServiceActor

ALIVE_TIMEOUT_S = 60.0
"""How long an actor may take to answer before it counts as lost (its node is gone)."""


@dataclass
class Replica:
    index: int
    url: str
    actor: ActorHandle[ServiceActor] | None
    """None for a server the recipe names (running elsewhere: the user's to keep up)."""
    away: bool = False
    """On another node than the loop's: it cannot read a path the loop wrote."""
    node: str | None = None
    """The Ray node it was pinned to (None: wherever Ray put it)."""
    restarts: int = 0
    """Restarts of its server the pool has seen (and acted on)."""


Launch = Callable[[int, set[str]], Replica]
"""Start replica `index` again, planned on the nodes alive now but those in the set."""
Grow = Callable[[int, "Node"], "Replica | None"]
"""Start replica `index` (one more than the pool has) on a node that joined; None: it does not fit there."""


def joined_nodes(taken: set[str]) -> list[Node]:
    """The alive nodes but those in `taken` (holding a replica of the run, or lost: the head counts
    a lost node alive for a while): nodes that joined, where the run may grow."""
    import ray

    return [n for n in nodes_from_ray(ray.nodes()) if n.id not in taken]


def restarts_of(actor: ActorHandle[ServiceActor]) -> int | None:
    """Its server's restarts so far; None when the actor is gone (its node left)."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    try:
        return ray.get(actor.restarts.remote(), timeout=ALIVE_TIMEOUT_S)
    except (RayActorError, GetTimeoutError):
        return None


def relaunch(launch: Launch, lost: Replica, join_timeout_s: float) -> Replica:
    """Start `lost` again elsewhere: tried every 2 s (no node with room yet, or one that left too)
    until `join_timeout_s` has passed, then a `ServiceError` saying why."""
    import ray
    from ray.exceptions import RayError

    with contextlib.suppress(Exception):
        ray.kill(lost.actor)
    # the head may count the lost node alive for a while yet (until its health checks fail)
    avoid = {lost.node} if lost.node else set()
    deadline = time.monotonic() + join_timeout_s
    while True:
        try:
            return launch(lost.index, avoid)
        except (LayoutError, ServiceError, RayError) as exc:
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"replica {lost.index} at {lost.url} was lost and no node that can hold it joined "
                    f"within {join_timeout_s:.0f}s: {exc}"
                ) from None
            time.sleep(2.0)


class ReplicaPool:
    """What a pool of one role's replicas holds (`EnginePool`, `EnvPool`): the replicas, how many
    it may grow to, and the nodes it has lost (the head counts them alive for a while)."""

    role = "replica"
    """How the run's output names one (`engine 2 joins at URL`)."""

    def __init__(self, replicas: list[Replica], grow: Grow | None, most: int | None) -> None:
        self.replicas = replicas
        self._grow = grow
        self.most = most or len(replicas)
        self.replaced = 0
        """Replicas started in place of lost ones."""
        self.grown = 0
        """Replicas started on nodes that joined, beyond those the run started with."""
        self.lost_nodes: set[str] = set()

    @property
    def url(self) -> str:
        return self.replicas[0].url

    @property
    def can_grow(self) -> bool:
        return self._grow is not None and len(self.replicas) < self.most

    def nodes(self) -> set[str]:
        """The nodes its replicas are on, and those it lost."""
        return {r.node for r in self.replicas if r.node} | self.lost_nodes

    def actors(self) -> list[ActorHandle[ServiceActor]]:
        return [r.actor for r in self.replicas if r.actor is not None]

    def grow(self, joined: list[Node], echo: Callable[[str], None]) -> set[str]:
        """One more replica on each node of `joined` that can hold one, up to `most`; the nodes taken."""
        taken: set[str] = set()
        for node in joined:
            if not self.can_grow or self._grow is None:
                break
            fresh = self._grow(len(self.replicas), node)
            if fresh is None:
                continue
            self._take(fresh)
            self.grown += 1
            taken.add(node.id)
            echo(f"{self.role} {fresh.index} joins at {fresh.url}, on a node that joined the cluster")
        return taken

    def _take(self, fresh: Replica) -> None:
        """Make a grown replica one of the pool's (and what it serves, the run's)."""
        self.replicas.append(fresh)

    def lose(self, replica: Replica) -> None:
        """`replica`'s node left: never grow onto it again."""
        if replica.node:
            self.lost_nodes.add(replica.node)
