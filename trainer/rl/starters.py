"""Starting a run's service replicas (engines, env servers) as Ray actors where the placement
puts them, and again where the nodes alive now can hold them when one is lost.

    engines = EngineStarter("engine", recipe, where.engines, where, log_dir, model, engine_key)
    replicas = engines.start([0, 1])          # together; each answers once its server serves
    fresh = engines.replace(1, {lost_node})   # planned again on the nodes alive now
    more = engines.grow(2, joined_node)       # one more, on a node that joined (None: no room)

A server on another node than the loop's gets what it reads by path sent there first: an
engine's starting model (`staging.stage_folder`); an env server's data, made by the env's
`prepare` hook run on its node.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..layout import Node, nodes_from_ray, place_on, recipe_plan
from ..recipe import Recipe
from .placement import Placement, pinned_node
from .replicas import Replica
from .services import ServiceActor, engine_env, engine_launch, env_config, server_command, sglang_port
from .staging import on_node, stage_folder

if TYPE_CHECKING:
    from ray.actor import ActorHandle


def trace_env(recipe: Recipe) -> dict[str, str]:
    """The run's OTEL_* variables, with OTEL_TRACES_EXPORTER=otlp when the recipe says `trace`."""
    env = {name: value for name, value in os.environ.items() if name.startswith("OTEL_")}
    if recipe.trace:
        env.setdefault("OTEL_TRACES_EXPORTER", "otlp")
    return env


def actor_options(recipe: Recipe) -> dict[str, Any]:
    """Ray options for every actor of the run: its tracing settings (`trace_env`) in the actor's
    environment, and so in the servers it starts. A Ray worker has the environment Ray started
    with (a Ray already up, a cluster's other nodes), not the driver's now."""
    env = trace_env(recipe)
    return {"runtime_env": {"env_vars": env}} if env else {}


def prepare_env(recipe: Recipe) -> dict[str, Any]:
    """The env's kwargs after its `prepare` hook (fixture generation, downloads) has run."""
    from ..advantages import load_function

    kwargs = dict(recipe.env.kwargs)
    if recipe.env.prepare:
        kwargs.update(load_function(recipe.env.prepare)(**recipe.env.prepare_args) or {})
    return kwargs


def service_actor(
    name: str,
    command: list[str],
    host: str,
    port: int,
    log_dir: Path,
    env: dict[str, str] | None = None,
    config: Any = None,
    **options: Any,
) -> ActorHandle[ServiceActor]:
    import ray

    # a role's planned options (its CPUs, node) over the defaults of a server that only waits on its child
    return (
        ray.remote(ServiceActor)
        .options(**{"num_cpus": 0, "max_concurrency": 4, **options})
        .remote(name, command, host, port, str(log_dir), env, config)
    )


def stage_model(model: str, options: dict[str, Any], where: Placement) -> None:
    """The model folder sent to a server's node when it is not this one's (a name or a missing
    path is the server's own to resolve there)."""
    if where.away(options) and Path(model).is_dir():
        stage_folder(model, options)


@dataclass(frozen=True)
class ReplicaStarter:
    """Starts replicas of one role: `actor` makes one replica's service actor."""

    role: str
    """The layout's role name ("engine", "env"), for planning it again."""
    recipe: Recipe
    placed: list[dict[str, Any]]
    """Ray options per replica, as first placed."""
    where: Placement

    def options(self, index: int, avoid: set[str] | None) -> dict[str, Any]:
        """As first placed; planned again on the nodes alive now but those in `avoid` when given."""
        if avoid is None or self.recipe.placement.layout is None:
            return self.placed[index]
        import ray

        nodes = [n for n in nodes_from_ray(ray.nodes()) if n.id not in avoid]
        return recipe_plan(self._with_count(index + 1), nodes).of(self.role)[index].ray_options()

    def _with_count(self, count: int) -> Recipe:
        """The recipe, its layout holding at least `count` of this role (a replica the run grew)."""
        layout = self.recipe.placement.layout
        spec = getattr(layout, self.role)
        if count <= spec.replicas:
            return self.recipe
        layout = layout.model_copy(update={self.role: spec.model_copy(update={"replicas": count})})
        return self.recipe.model_copy(update={"placement": self.recipe.placement.model_copy(update={"layout": layout})})

    def actor(self, index: int, options: dict[str, Any]) -> ActorHandle[ServiceActor]:
        raise NotImplementedError

    def prepare_nodes(self, placed: list[dict[str, Any]]) -> None:
        """What the replicas' nodes need before any starts (nothing, unless a role says)."""

    def name(self, index: int) -> str:
        """The server's name, and so its log's (`logs/engine.log`, `logs/engine-1.log`, ...)."""
        return f"{self.role}-{index}" if index else self.role

    def start(self, indices: list[int], avoid: set[str] | None = None) -> list[Replica]:
        """Start these replicas together (planned again, off the nodes in `avoid`, when given);
        each answers once its server serves."""
        return self._start([(i, self.options(i, avoid)) for i in indices])

    def replace(self, index: int, avoid: set[str]) -> Replica:
        return self.start([index], avoid)[0]

    def grow(self, index: int, node: Node) -> Replica | None:
        """Replica `index` (one more than the run has) on `node`, a node that joined and holds none
        of the run's replicas; None where its label or its room does not fit the role."""
        layout = self.recipe.placement.layout
        assignment = place_on(layout, self.role, index, node) if layout is not None else None
        if assignment is None:
            return None
        return self._start([(index, assignment.ray_options())])[0]

    def _start(self, placed: list[tuple[int, dict[str, Any]]]) -> list[Replica]:
        import ray

        self.prepare_nodes([options for _, options in placed])
        actors = [(i, options, self.actor(i, {**options, **actor_options(self.recipe)})) for i, options in placed]
        try:
            urls = ray.get([actor.start.remote() for _, _, actor in actors])
        except BaseException:
            stop_services([actor for _, _, actor in actors])
            raise
        return [
            Replica(i, url, actor, self.where.away(options), pinned_node(options))
            for (i, options, actor), url in zip(actors, urls, strict=True)
        ]


@dataclass(frozen=True)
class EngineStarter(ReplicaStarter):
    model: str = ""
    log_dir: Path = Path("logs")
    engine_key: str | None = None

    def prepare_nodes(self, placed: list[dict[str, Any]]) -> None:
        """The model sent once to each other node that gets a replica."""
        by_node = {pinned_node(options): options for options in placed}
        for options in by_node.values():
            stage_model(self.model, options, self.where)

    def actor(self, index: int, options: dict[str, Any]) -> ActorHandle[ServiceActor]:
        recipe, host = self.recipe, self.recipe.placement.host
        port = sglang_port(host) if recipe.engine.backend == "sglang" else 0
        command, config = engine_launch(recipe, self.model, host, port, self.engine_key, self.log_dir)
        env = engine_env(recipe, self.engine_key)
        return service_actor(self.name(index), command, host, port, self.log_dir, env, config, **options)


@dataclass(frozen=True)
class EnvStarter(ReplicaStarter):
    log_dir: Path = Path("logs")
    local_kwargs: dict[str, Any] | None = None
    """The env's kwargs made here, reused by every env server on this node."""

    def kwargs(self, options: dict[str, Any]) -> dict[str, Any]:
        """`prepare_env`, run on the env server's node: the data paths it returns are that node's."""
        if not self.where.away(options):
            return self.local_kwargs if self.local_kwargs is not None else prepare_env(self.recipe)
        import ray

        return ray.get(on_node(prepare_env, options).remote(self.recipe))

    def actor(self, index: int, options: dict[str, Any]) -> ActorHandle[ServiceActor]:
        host = self.recipe.placement.host
        config = env_config(self.recipe, self.kwargs(options), host)
        return service_actor(self.name(index), server_command("env"), host, 0, self.log_dir, None, config, **options)


def stop_services(actors: list[ActorHandle[ServiceActor] | None]) -> None:
    """Stop the servers of these service actors and the actors (safe to call twice); None stands
    for a server the run did not start, and is skipped."""
    import ray

    for actor in reversed([a for a in actors if a is not None]):
        with contextlib.suppress(Exception):
            ray.get(actor.stop.remote(), timeout=60)
        with contextlib.suppress(Exception):
            ray.kill(actor)
