"""Setting up a run: Ray, the servers, and what the loop holds of them.

Everything here is started once per run and handed to the loop explicitly (`Services`, the env
and engine pools, `Placement`, the layout's `Plan`); nothing is global. `services(recipe,
run_dir, model, envs, where)` is a context manager that stops what it started; `start_envs`
starts the env servers first (the expert's demonstrations and the model built from them need
them before the engines start).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from roost.rollout.keys import ADMIN_KEY, ENGINE_KEY, new_key

from ..recipe import GatewayConfig, Recipe, RoleEngineConfig
from .engine_pool import EnginePool, SyncTarget
from .env_pool import EnvPool
from .placement import Placement, pinned_node
from .replicas import Replica, joined_nodes
from .services import ServiceActor, gateway_config, server_command
from .starters import EngineStarter, EnvStarter, actor_options, prepare_env, service_actor, stage_model, stop_services

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


@dataclass
class Services:
    """The run's servers; an actor is None for a server the recipe names (running elsewhere)."""

    envs: EnvPool
    engines: EnginePool
    gateway: ActorHandle[ServiceActor] | None
    gateway_url: str
    store: Path
    engine_key: str | None
    admin_key: str
    adapter: str | None = None
    """In a LoRA run, the name the engine serves the run's adapter under: the model the rollouts
    ask the gateway for, so each recorded call names it."""
    weight_sync: str = "disk"
    """How the weights reach the engine (`engine.weight_sync`): disk or http."""
    fixed_nodes: frozenset[str] = frozenset()
    """The nodes of the roles that do not grow (the trainer's ranks, the gateway)."""
    teacher_engines: RoleEngines | None = None
    """The teachers' engines (`recipe.teachers`), started when RL starts: scored against directly,
    not through the gateway."""
    judges: JudgeServices | None = None
    """The judges' engines and gateways (`recipe.judges`), started when RL starts."""

    @property
    def teachers(self) -> dict[str, str]:
        """The teacher engines' URLs by name (none before they start)."""
        started = self.teacher_engines.started if self.teacher_engines is not None else {}
        return {name: replica.url for name, replica in started.items()}

    @property
    def engine_url(self) -> str:
        return self.engines.url

    @property
    def env_url(self) -> str:
        return self.envs.url

    def ensure_serving(self, echo: Callable[[str], None]) -> None:
        """Env servers and engines all up (lost ones replaced), engines at the newest weights; then
        each node that joined and holds none of the run's replicas takes one more, env server
        first, where the layout lets them grow (`max_replicas`)."""
        self.envs.ensure_serving(echo)
        self.engines.ensure_serving(echo)
        if not (self.envs.can_grow or self.engines.can_grow):
            return
        joined = joined_nodes(set(self.fixed_nodes) | self.envs.nodes() | self.engines.nodes())
        taken = self.envs.grow(joined, echo)
        self.engines.grow([n for n in joined if n.id not in taken], echo)


@dataclass
class RoleEngines:
    """One engine per service of a role (`teacher-NAME`, `judge-NAME`), placed and supervised by
    the code that runs the rollout engine, each from the recipe with its own model and engine
    section; one the recipe names by `engine.url` is the user's to keep up. Started by the loop
    when RL starts, since a service of model `student` serves the policy RL starts from (after SFT)."""

    role: str
    configs: dict[str, RoleEngineConfig]
    recipe: Recipe
    where: Placement
    log_dir: Path
    engine_key: str | None
    started: dict[str, Replica] = field(default_factory=dict)

    def start(self, student: str, names: list[str] | None = None) -> None:
        """Start these services (None: all of the role's) that are not up yet."""
        for name in self.configs if names is None else names:
            if name not in self.started:
                self.started[name] = self._start(name, self.configs[name], student)

    def _start(self, name: str, config: RoleEngineConfig, student: str) -> Replica:
        if config.engine.url is not None:
            return Replica(0, config.engine.url, None)
        starter = EngineStarter(
            f"{self.role}-{name}",
            self.own(config),
            self.where.engines[:1],
            self.where,
            self.model(config, student),
            self.log_dir,
            self.engine_key,
        )
        return starter.start([0])[0]

    def own(self, config: RoleEngineConfig) -> Recipe:
        """The run's recipe with the service's engine section, and never a LoRA adapter."""
        trainer = self.recipe.trainer.model_copy(update={"lora": None})
        return self.recipe.model_copy(update={"engine": config.engine, "trainer": trainer})

    @staticmethod
    def model(config: RoleEngineConfig, student: str) -> str:
        from roost.rollout.engine.tiny_model import resolve_model

        return student if config.model == "student" else str(resolve_model(config.model))

    def actors(self) -> list[ActorHandle[ServiceActor] | None]:
        return [replica.actor for replica in self.started.values()]


@dataclass
class JudgeServices:
    """Each judge's engine (`RoleEngines` of role judge) and a gateway of its own in front of it
    (`judge-NAME-gateway`), recording into the run's store: the judge serves another model than
    the run's gateway does. Its admin key is the run's gateway's."""

    engines: RoleEngines
    store: Path
    admin_key: str
    gateways: dict[str, ActorHandle[ServiceActor]] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)

    def start(self, student: str, names: list[str]) -> dict[str, str]:
        """Start these judges (those not up yet); their gateways' URLs by name."""
        import ray

        self.engines.start(student, names)
        for name in names:
            if name in self.urls:
                continue
            self.gateways[name] = self._gateway(name, student)
            self.urls[name] = ray.get(self.gateways[name].start.remote())
        return {name: self.urls[name] for name in names}

    def _gateway(self, name: str, student: str) -> ActorHandle[ServiceActor]:
        engines, config = self.engines, self.engines.configs[name]
        recipe, where, host = engines.recipe, engines.where, engines.recipe.placement.host
        # the settings of the run's gateway (admission, workers) are for the policy's episodes
        own = engines.own(config).model_copy(update={"gateway": GatewayConfig()})
        model = engines.model(config, student)
        stage_model(model, where.gateway, where)
        key_env = {ENGINE_KEY.env: engines.engine_key} if engines.engine_key else {}
        return service_actor(
            f"judge-{name}-gateway",
            server_command("gateway"),
            host,
            0,
            engines.log_dir,
            {**key_env, ADMIN_KEY.env: self.admin_key},
            gateway_config(own, [engines.started[name].url], model, self.store, host),
            **where.gateway,
            **actor_options(recipe),
        )

    def actors(self) -> list[ActorHandle[ServiceActor] | None]:
        """Engines first: `stop_services` stops the gateways in front of them before them."""
        return [*self.engines.actors(), *self.gateways.values()]


def fixed_nodes(where: Placement) -> frozenset[str]:
    """The nodes the trainer's ranks and the gateway are pinned to (and the loop's)."""
    pinned = {pinned_node(options) for options in [*where.trainer, where.gateway]} | {where.here}
    return frozenset(node for node in pinned if node)


def adapter_name(recipe: Recipe) -> str | None:
    """The engine's name for a LoRA run's adapter (None without `trainer.lora`)."""
    return None if recipe.trainer.lora is None else f"{recipe.name}-lora"


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


def start_envs(recipe: Recipe, log_dir: Path, where: Placement) -> EnvPool:
    """The run's env servers (or the running one the recipe names), each on its planned node with
    the data the env's `prepare` made there."""
    if recipe.env.server.url:
        return EnvPool([Replica(0, recipe.env.server.url, None)], None)
    local = prepare_env(recipe) if not all(where.away(options) for options in where.envs) else None
    starter = EnvStarter("env", recipe, where.envs, where, log_dir, local)
    layout = recipe.placement.layout
    most = layout.env.most if layout is not None else None
    return EnvPool(starter.start(list(range(len(where.envs)))), starter.replace, grow=starter.grow, most=most)


@contextlib.contextmanager
def services(recipe: Recipe, run_dir: Path, model: str, envs: EnvPool, where: Placement) -> Iterator[Services]:
    """Engines and gateway (started unless the recipe names running ones), with the env servers."""
    host = recipe.placement.host
    log_dir = run_dir / "logs"
    store = run_dir / "trajectories.sqlite"
    engine_key, admin_key = _keys(recipe)
    key_env = {ENGINE_KEY.env: engine_key} if engine_key else {}
    starter = EngineStarter("engine", recipe, where.engines, where, model, log_dir, engine_key)
    pool: EnginePool | None = None
    replicas: list[Replica] = []
    teachers = RoleEngines("teacher", dict(recipe.teachers), recipe, where, log_dir, engine_key)
    judges = JudgeServices(
        RoleEngines("judge", dict(recipe.judges), recipe, where, log_dir, engine_key), store, admin_key
    )
    gateway = None
    try:
        if recipe.engine.url is None:
            replicas = starter.start(list(range(len(where.engines))))
        else:
            replicas = [Replica(0, recipe.engine.url, None)]
        gateway_url = recipe.gateway.url
        if gateway_url is None:
            stage_model(model, where.gateway, where)
            gateway = service_actor(
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
            import ray

            gateway_url = ray.get(gateway.start.remote())
        target = SyncTarget(engine_key, gateway_url, admin_key, recipe.engine.weight_sync, adapter_name(recipe))
        layout = recipe.placement.layout
        most = layout.engine.most if layout is not None and recipe.engine.url is None else None
        pool = EnginePool(replicas, starter.replace, target, grow=starter.grow if most else None, most=most)
        yield Services(
            envs,
            pool,
            gateway,
            gateway_url,
            store,
            engine_key,
            admin_key,
            adapter_name(recipe),
            recipe.engine.weight_sync,
            fixed_nodes(where),
            teachers,
            judges,
        )
    finally:
        engines = pool.actors() if pool is not None else [r.actor for r in replicas]
        stop_services([*envs.actors(), *engines, gateway, *teachers.actors(), *judges.actors()])
