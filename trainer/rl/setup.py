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
from .services import ServiceActor, engine_env, engine_launch, env_config, gateway_config, server_command, sglang_port

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
    engine: dict[str, Any]
    env: dict[str, Any] = field(default_factory=dict)
    gateway: dict[str, Any] = field(default_factory=dict)


def cluster_plan(recipe: Recipe) -> Plan:
    """The recipe's layout planned on the nodes of the Ray this process is connected to."""
    import ray

    return recipe_plan(recipe, nodes_from_ray(ray.nodes()))


def placement(recipe: Recipe, plan: Plan) -> Placement:
    """Where the run's actors go: as `plan` says for a recipe with `placement.layout`; else the
    trainer ranks in one placement group, the engine in rank 0's bundle when colocated."""
    if recipe.placement.layout is not None:
        return planned_placement(plan)
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
        return Placement([{} for _ in range(world)], {"num_gpus": p.engine_gpus})
    group = placement_group(bundles, strategy="PACK" if p.colocate else "SPREAD")
    ray.get(group.ready())

    def in_bundle(index: int) -> dict[str, Any]:
        return {"scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)}

    engine = {"num_gpus": p.engine_gpus, **(in_bundle(0) if p.colocate else {})}
    return Placement([in_bundle(rank) for rank in range(world)], engine)


def planned_placement(plan: Plan) -> Placement:
    """Each role's actor pinned to its planned node with its planned CPUs and GPUs. Refuses a plan
    this run cannot start yet: more than one engine or env server, or a replica on a node other
    than this process's (the servers bind `placement.host` and every role reads the run folder and
    the model by path)."""
    import ray

    here = ray.get_runtime_context().get_node_id()
    for role in ("engine", "env"):
        if len(plan.of(role)) > 1:
            raise LayoutError(
                f"placement.layout.{role}.replicas is {len(plan.of(role))}: planned, but roost train starts one "
                f"{role} today; set it to 1 (roost train --plan shows the plan of more)"
            )
    away = [f"{a.role} {a.index} on {a.node.name}" for a in plan.assignments if a.node.id != here]
    if away:
        raise LayoutError(
            f"the plan puts {', '.join(away)}, not on this node ({here[:8]}), where roost train starts every "
            "role today; label this node for those roles (or leave their node out) to run here; "
            "roost train --plan shows the plan without starting it"
        )
    return Placement(
        [a.ray_options() for a in plan.of("trainer")],
        plan.of("engine")[0].ray_options(),
        plan.of("env")[0].ray_options(),
        plan.of("gateway")[0].ray_options(),
    )


def prepare_env(recipe: Recipe) -> dict[str, Any]:
    """The env's kwargs after its `prepare` hook (fixture generation, downloads) has run."""
    from ..advantages import load_function

    kwargs = dict(recipe.env.kwargs)
    if recipe.env.prepare:
        kwargs.update(load_function(recipe.env.prepare)(**recipe.env.prepare_args) or {})
    return kwargs


@dataclass
class Services:
    """The run's servers; an actor is None for a server the recipe names (running elsewhere)."""

    env: ActorHandle[ServiceActor] | None
    engine: ActorHandle[ServiceActor] | None
    gateway: ActorHandle[ServiceActor] | None
    env_url: str
    engine_url: str
    gateway_url: str
    store: Path
    engine_key: str | None
    admin_key: str
    adapter: str | None = None
    """In a LoRA run, the name the engine serves the run's adapter under: the model the rollouts
    ask the gateway for, so each recorded call names it."""
    weight_sync: str = "disk"
    """How the weights reach the engine (`engine.weight_sync`): disk or http."""


def adapter_name(recipe: Recipe) -> str | None:
    """The engine's name for a LoRA run's adapter (None without `trainer.lora`)."""
    return None if recipe.trainer.lora is None else f"{recipe.name}-lora"


def _service(
    name: str,
    command: list[str],
    host: str,
    port: int,
    log_dir: Path,
    env: dict[str, str] | None = None,
    config: Any = None,
    **options: Any,
) -> tuple[ActorHandle[ServiceActor], str]:
    import ray

    # a role's planned options (its CPUs, node) over the defaults of a server that only waits on its child
    actor = (
        ray.remote(ServiceActor)
        .options(**{"num_cpus": 0, "max_concurrency": 4, **options})
        .remote(name, command, host, port, str(log_dir), env, config)
    )
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


@contextlib.contextmanager
def services(recipe: Recipe, run_dir: Path, model: str, env: EnvServer, where: Placement) -> Iterator[Services]:
    """Engine and gateway (started unless the recipe names running ones), with the env server."""
    host = recipe.placement.host
    log_dir = run_dir / "logs"
    store = run_dir / "trajectories.sqlite"
    started = [env.actor]
    engine_key, admin_key = _keys(recipe)
    key_env = {ENGINE_KEY.env: engine_key} if engine_key else {}
    options = actor_options(recipe)
    try:
        engine, engine_url = None, recipe.engine.url
        if engine_url is None:
            port = sglang_port(host) if recipe.engine.backend == "sglang" else 0
            command, config = engine_launch(recipe, model, host, port, engine_key, log_dir)
            key_and_logprobs = engine_env(recipe, engine_key)
            engine, engine_url = _service(
                "engine", command, host, port, log_dir, key_and_logprobs, config, **where.engine, **options
            )
            started.append(engine)
        gateway, gateway_url = None, recipe.gateway.url
        if gateway_url is None:
            gateway, gateway_url = _service(
                "gateway",
                server_command("gateway"),
                host,
                0,
                log_dir,
                {**key_env, ADMIN_KEY.env: admin_key},
                gateway_config(recipe, engine_url, model, store, host),
                **where.gateway,
                **options,
            )
            started.append(gateway)
        yield Services(
            env.actor,
            engine,
            gateway,
            env.url,
            engine_url,
            gateway_url,
            store,
            engine_key,
            admin_key,
            adapter_name(recipe),
            recipe.engine.weight_sync,
        )
    finally:
        stop_services(started)


def stop_services(actors: list[ActorHandle[ServiceActor] | None]) -> None:
    """Stop the servers of these service actors and the actors (safe to call twice); None stands
    for a server the run did not start, and is skipped."""
    import ray

    for actor in reversed([a for a in actors if a is not None]):
        with contextlib.suppress(Exception):
            ray.get(actor.stop.remote(), timeout=60)
        with contextlib.suppress(Exception):
            ray.kill(actor)
