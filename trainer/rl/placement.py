"""Where a run's actors go: each role's Ray options, from the recipe's layout planned on the
cluster (`roost.trainer.layout`), or Ray's placement group without one.

    where = placement(recipe, cluster_plan(recipe))
    actor.options(**where.engines[0])
    where.away(where.envs[0])      # on another node than the loop's: paths must be sent there
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..layout import LayoutError, Plan, nodes_from_ray, recipe_plan
from ..recipe import Recipe


@dataclass
class Placement:
    """Ray options per actor of the run's roles."""

    trainer: list[dict[str, Any]]
    """Ray options per trainer rank."""
    engines: list[dict[str, Any]]
    """Ray options per engine replica."""
    envs: list[dict[str, Any]] = field(default_factory=lambda: [{}])
    """Ray options per env server."""
    gateway: dict[str, Any] = field(default_factory=dict)
    here: str | None = None
    """The node this process (the loop) runs on, when the roles are pinned to nodes (a layout)."""

    def away(self, options: dict[str, Any]) -> bool:
        """Whether an actor with these options runs on another node than the loop's: it cannot
        read a path the loop wrote (the model, the env's data), so they are sent to it."""
        node = pinned_node(options)
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
        check_env_servers(recipe, where)
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
    this run cannot start: a trainer rank on a node other than this process's (the loop reads what
    rank 0 exports by path)."""
    import ray

    here = ray.get_runtime_context().get_node_id()
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
        [a.ray_options() for a in plan.of("env")],
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


def check_env_servers(recipe: Recipe, where: Placement) -> None:
    """Each rollout worker plays against one env server (worker i, server i mod servers): more
    servers than workers would leave some idle."""
    servers, workers = len(where.envs), recipe.rollout.workers
    layout = recipe.placement.layout
    if layout is not None and layout.env.most > max(workers, servers):
        raise LayoutError(
            f"placement.layout.env.max_replicas is {layout.env.most} but rollout.workers is {workers}: each "
            f"worker plays against one env server, so a run grown that far would leave some idle; set "
            f"rollout.workers to at least {layout.env.most}"
        )
    if servers > workers:
        raise LayoutError(
            f"placement.layout.env.replicas is {servers} but rollout.workers is {workers}: each worker plays "
            f"against one env server, so {servers - workers} would be idle; set rollout.workers to at least {servers}"
        )


def pinned_node(options: dict[str, Any]) -> str | None:
    """The node Ray options pin an actor to (None: wherever Ray puts it)."""
    return getattr(options.get("scheduling_strategy"), "node_id", None)
