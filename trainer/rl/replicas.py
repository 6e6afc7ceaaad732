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

from ..layout import LayoutError
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
