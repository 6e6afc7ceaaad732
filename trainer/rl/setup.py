"""Setting up a run: Ray, where actors go, the env's data, the model, and the servers.

Everything here is started once per run and handed to the loop explicitly (`Services`,
`EnvServer`, `Placement`, the layout's `Plan`); nothing is global. `services(recipe, run_dir, model, env, where)`
is a context manager that stops what it started.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roost.rollout.keys import ADMIN_KEY, ENGINE_KEY, new_key

from ..layout import LayoutError, Plan, nodes_from_ray, recipe_plan
from ..recipe import Recipe
from .engine_pool import EnginePool, EngineReplica, SyncTarget
from .services import ServiceActor, engine_env, engine_launch, env_config, gateway_config, server_command, sglang_port
from .staging import on_node, stage_folder

if TYPE_CHECKING:
    from ray.actor import ActorHandle


@contextlib.contextmanager
def ray_session(recipe: Recipe) -> Iterator[None]:
    """A local Ray (or the cluster at `placement.ray_address`) for the run; reuses one already up."""
    import sys

    import ray

    for folder in recipe.python_path:
        if folder not in sys.path:
            sys.path.insert(0, folder)
    if ray.is_initialized():
        yield
        return
    placement = recipe.placement
    # Actors (and the servers they start) import the recipe's own modules too.
    runtime_env = {
        "env_vars": {
            "PYTHONPATH": os.pathsep.join(
                [*recipe.python_path, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
            )
        }
    }
    if placement.ray_address:
        ray.init(address=placement.ray_address, log_to_driver=False, runtime_env=runtime_env)
    else:
        ray.init(
            num_cpus=placement.num_cpus or os.cpu_count(),
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            runtime_env=runtime_env,
        )
    try:
        yield
    finally:
        ray.shutdown()


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


@dataclass
class Placement:
    """Ray options per actor of the run's roles."""

    trainer: list[dict[str, Any]]
    """Ray options per trainer rank."""
    engines: list[dict[str, Any]]
    """Ray options per engine replica."""
    env: dict[str, Any] = field(default_factory=dict)
    gateway: dict[str, Any] = field(default_factory=dict)
    here: str | None = None
    """The node this process (the loop) runs on, when the roles are pinned to nodes (a layout)."""

    def away(self, options: dict[str, Any]) -> bool:
        """Whether an actor with these options runs on another node than the loop's: it cannot
        read a path the loop wrote (the model, the env's data), so they are sent to it."""
        node = _pinned_node(options)
        return self.here is not None and node is not None and node != self.here

    def local(self) -> dict[str, Any]:
        """Ray options that keep a zero-CPU helper actor (a rollout worker) on the loop's node."""
        if self.here is None:
            return {}
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(self.here, soft=False)}


def cluster_plan(recipe: Recipe) -> Plan:
    """The recipe's layout planned on the nodes of the Ray this process is connected to."""
    import ray

    return recipe_plan(recipe, nodes_from_ray(ray.nodes()))


def placement(recipe: Recipe, plan: Plan) -> Placement:
    """Where the run's actors go: as `plan` says for a recipe with `placement.layout`; else the
    trainer ranks in one placement group, the engine in rank 0's bundle when colocated."""
    if recipe.placement.layout is not None:
        where = planned_placement(plan)
        check_away_engines(recipe, where)
        return where
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    p = recipe.placement
    world = recipe.trainer.tp * recipe.trainer.dp
    bundles = []
    for rank in range(world):
        gpus = p.trainer_gpus + (p.engine_gpus if p.colocate and rank == 0 else 0.0)
        bundles.append({k: v for k, v in {"CPU": p.trainer_cpus, "GPU": gpus}.items() if v > 0})
    if not all(bundles):
        return Placement([{} for _ in range(world)], [{"num_gpus": p.engine_gpus}])
    group = placement_group(bundles, strategy="PACK" if p.colocate else "SPREAD")
    ray.get(group.ready())

    def in_bundle(index: int) -> dict[str, Any]:
        return {"scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)}

    engine = {"num_gpus": p.engine_gpus, **(in_bundle(0) if p.colocate else {})}
    return Placement([in_bundle(rank) for rank in range(world)], [engine])


def planned_placement(plan: Plan) -> Placement:
    """Each role's actor pinned to its planned node with its planned CPUs and GPUs. Refuses a plan
    this run cannot start yet: more than one env server, or a trainer rank on a node other than
    this process's (the loop reads what rank 0 exports by path)."""
    import ray

    here = ray.get_runtime_context().get_node_id()
    if len(plan.of("env")) > 1:
        raise LayoutError(
            f"placement.layout.env.replicas is {len(plan.of('env'))}: planned, but roost train starts one env "
            "server today; set it to 1 (roost train --plan shows the plan of more)"
        )
    away = [f"trainer {a.index} on {a.node.name}" for a in plan.of("trainer") if a.node.id != here]
    if away:
        raise LayoutError(
            f"the plan puts {', '.join(away)}, not on this node ({here[:8]}), where the loop reads the trainer's "
            "exported weights; label this node for the trainer (or leave its node out), and start roost train "
            "there; roost train --plan shows the plan without starting it"
        )
    return Placement(
        [a.ray_options() for a in plan.of("trainer")],
        [a.ray_options() for a in plan.of("engine")],
        plan.of("env")[0].ray_options(),
        plan.of("gateway")[0].ray_options(),
        here,
    )


def check_away_engines(recipe: Recipe, where: Placement) -> None:
    """An engine on another node than the loop's takes its weights over the network: roost's
    embedded engine over HTTP (`engine.weight_sync: http`). Other engines there are refused."""
    if not any(where.away(options) for options in where.engines):
        return
    if recipe.engine.backend != "embedded" or recipe.engine.url:
        raise LayoutError(
            f"the plan puts an engine on another node than this one, and engine.backend is {recipe.engine.backend}: "
            "roost train sends weights across nodes to roost's embedded engine only (over HTTP); put the "
            "engine on this node, or use engine.backend: embedded"
        )
    if recipe.engine.weight_sync != "http":
        raise LayoutError(
            "the plan puts an engine on another node than this one, which cannot read the weights the "
            f"trainer writes here (engine.weight_sync is {recipe.engine.weight_sync}); set "
            "engine.weight_sync: http, or put the engine on this node"
        )


def prepare_env(recipe: Recipe) -> dict[str, Any]:
    """The env's kwargs after its `prepare` hook (fixture generation, downloads) has run."""
    from ..advantages import load_function

    kwargs = dict(recipe.env.kwargs)
    if recipe.env.prepare:
        kwargs.update(load_function(recipe.env.prepare)(**recipe.env.prepare_args) or {})
    return kwargs


def env_kwargs(recipe: Recipe, where: Placement) -> dict[str, Any]:
    """`prepare_env`, run on the env server's node: the data paths it returns are that node's."""
    if not where.away(where.env) or recipe.env.server.url:
        return prepare_env(recipe)
    import ray

    return ray.get(on_node(prepare_env, where.env).remote(recipe))


@dataclass
class Services:
    """The run's servers; an actor is None for a server the recipe names (running elsewhere)."""

    env: ActorHandle[ServiceActor] | None
    engines: EnginePool
    gateway: ActorHandle[ServiceActor] | None
    env_url: str
    gateway_url: str
    store: Path
    engine_key: str | None
    admin_key: str
    adapter: str | None = None
    """In a LoRA run, the name the engine serves the run's adapter under: the model the rollouts
    ask the gateway for, so each recorded call names it."""
    weight_sync: str = "disk"
    """How the weights reach the engine (`engine.weight_sync`): disk or http."""

    @property
    def engine_url(self) -> str:
        return self.engines.url


def adapter_name(recipe: Recipe) -> str | None:
    """The engine's name for a LoRA run's adapter (None without `trainer.lora`)."""
    return None if recipe.trainer.lora is None else f"{recipe.name}-lora"


def _actor(
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


def _service(*args: Any, **options: Any) -> tuple[ActorHandle[ServiceActor], str]:
    import ray

    actor = _actor(*args, **options)
    return actor, ray.get(actor.start.remote())


def _keys(recipe: Recipe) -> tuple[str | None, str]:
    """The engine's and the gateway's keys: new ones for servers the run starts, from the
    environment (ROOST_ENGINE_KEY, ROOST_ADMIN_KEY) for running ones the recipe names."""
    engine_key = os.environ.get(ENGINE_KEY.env) if recipe.engine.url else new_key(ENGINE_KEY)
    admin_key = os.environ.get(ADMIN_KEY.env) if recipe.gateway.url else new_key(ADMIN_KEY)
    if not admin_key:
        raise ValueError(
            f"gateway.url names a running gateway ({recipe.gateway.url}); set {ADMIN_KEY.env} to "
            "its admin key so the run can open sessions and pause it for weight updates"
        )
    return engine_key, admin_key


@dataclass(frozen=True)
class EnvServer:
    url: str
    actor: ActorHandle[ServiceActor] | None = None
    """The service actor running it; None for a running server the recipe names."""


def start_env(recipe: Recipe, env_kwargs: dict[str, Any], log_dir: Path, where: Placement | None = None) -> EnvServer:
    if recipe.env.server.url:
        return EnvServer(recipe.env.server.url)
    host = recipe.placement.host
    config = env_config(recipe, env_kwargs, host)
    options = {**(where.env if where else {}), **actor_options(recipe)}
    actor, url = _service("env", server_command("env"), host, 0, log_dir, None, config, **options)
    return EnvServer(url, actor)


def _staged(model: str, options: dict[str, Any], where: Placement) -> None:
    """The model folder sent to a server's node when it is not this one's (a name or a missing
    path is the server's own to resolve there)."""
    if where.away(options) and Path(model).is_dir():
        stage_folder(model, options)


@dataclass(frozen=True)
class EngineStarter:
    """Starts engine replica `index` of a run, where the plan of the nodes alive now puts it."""

    recipe: Recipe
    model: str
    log_dir: Path
    engine_key: str | None
    where: Placement

    def options(self, index: int, avoid: set[str] | None) -> dict[str, Any]:
        """As first placed; planned again on the nodes alive now but those in `avoid` when given."""
        if avoid is None or self.recipe.placement.layout is None:
            return self.where.engines[index]
        import ray

        nodes = [n for n in nodes_from_ray(ray.nodes()) if n.id not in avoid]
        return recipe_plan(self.recipe, nodes).of("engine")[index].ray_options()

    def actor(self, index: int, options: dict[str, Any]) -> ActorHandle[ServiceActor]:
        recipe, host = self.recipe, self.recipe.placement.host
        _staged(self.model, options, self.where)
        port = sglang_port(host) if recipe.engine.backend == "sglang" else 0
        command, config = engine_launch(recipe, self.model, host, port, self.engine_key, self.log_dir)
        env = engine_env(recipe, self.engine_key)
        return _actor(
            f"engine-{index}" if index else "engine",
            command,
            host,
            port,
            self.log_dir,
            env,
            config,
            **options,
            **actor_options(recipe),
        )

    def start(self, indices: list[int], avoid: set[str] | None = None) -> list[EngineReplica]:
        """Start these replicas together (planned again, off the nodes in `avoid`, when given);
        each answers once its server serves."""
        import ray

        placed = [(i, self.options(i, avoid)) for i in indices]
        actors = [(i, options, self.actor(i, options)) for i, options in placed]
        try:
            urls = ray.get([actor.start.remote() for _, _, actor in actors])
        except BaseException:
            stop_services([actor for _, _, actor in actors])
            raise
        return [
            EngineReplica(i, url, actor, self.where.away(options), _pinned_node(options))
            for (i, options, actor), url in zip(actors, urls, strict=True)
        ]

    def replace(self, index: int, avoid: set[str]) -> EngineReplica:
        return self.start([index], avoid)[0]


def _pinned_node(options: dict[str, Any]) -> str | None:
    return getattr(options.get("scheduling_strategy"), "node_id", None)


@contextlib.contextmanager
def services(recipe: Recipe, run_dir: Path, model: str, env: EnvServer, where: Placement) -> Iterator[Services]:
    """Engines and gateway (started unless the recipe names running ones), with the env server."""
    host = recipe.placement.host
    log_dir = run_dir / "logs"
    store = run_dir / "trajectories.sqlite"
    started = [env.actor]
    engine_key, admin_key = _keys(recipe)
    key_env = {ENGINE_KEY.env: engine_key} if engine_key else {}
    starter = EngineStarter(recipe, model, log_dir, engine_key, where)
    pool: EnginePool | None = None
    replicas: list[EngineReplica] = []
    try:
        if recipe.engine.url is None:
            replicas = starter.start(list(range(len(where.engines))))
        else:
            replicas = [EngineReplica(0, recipe.engine.url, None)]
        gateway, gateway_url = None, recipe.gateway.url
        if gateway_url is None:
            _staged(model, where.gateway, where)
            gateway, gateway_url = _service(
                "gateway",
                server_command("gateway"),
                host,
                0,
                log_dir,
                {**key_env, ADMIN_KEY.env: admin_key},
                gateway_config(recipe, [r.url for r in replicas], model, store, host),
                **where.gateway,
                **actor_options(recipe),
            )
            started.append(gateway)
        target = SyncTarget(engine_key, gateway_url, admin_key, recipe.engine.weight_sync, adapter_name(recipe))
        pool = EnginePool(replicas, starter.replace, target)
        yield Services(
            env.actor,
            pool,
            gateway,
            env.url,
            gateway_url,
            store,
            engine_key,
            admin_key,
            adapter_name(recipe),
            recipe.engine.weight_sync,
        )
    finally:
        engines = pool.actors() if pool is not None else [r.actor for r in replicas]
        stop_services([*started[:1], *engines, *started[1:]])


def stop_services(actors: list[ActorHandle[ServiceActor] | None]) -> None:
    """Stop the servers of these service actors and the actors (safe to call twice); None stands
    for a server the run did not start, and is skipped."""
    import ray

    for actor in reversed([a for a in actors if a is not None]):
        with contextlib.suppress(Exception):
            ray.get(actor.stop.remote(), timeout=60)
        with contextlib.suppress(Exception):
            ray.kill(actor)
