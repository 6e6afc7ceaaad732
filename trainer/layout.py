"""Role-device layout: where each role of a run goes, checked against the cluster before anything starts.

    nodes = nodes_from_ray(ray.nodes())
    the_plan = plan(recipe.placement.roles(), nodes, trainer_ranks=recipe.trainer.tp * recipe.trainer.dp)
    print(the_plan.render())
    actor.options(**the_plan.of("engine")[0].ray_options())

A recipe's `placement.layout` names the roles (trainer ranks, engine replicas, env servers, the
gateway), the CPUs and GPUs each replica takes, and the node it goes on: `node: rollout` means a
Ray node started with the custom resource `roost_node_rollout` (`ray start --resources
'{"roost_node_rollout": 1}'`); no `node`, any node. `mode` is `colocated` (the engine shares the
trainer's nodes and may share its GPUs by fractions) or `split` (each role on GPUs of its own).

`plan` places the replicas first-fit, role by role in that order, on the nodes' total resources,
and returns which replica goes to which node with what; a layout the cluster cannot hold raises
`LayoutError` naming the role, what it asked, what the nodes have, and the fix.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:
    from .recipe import Recipe

NODE_RESOURCE_PREFIX = "roost_node_"
ROLES = ("trainer", "engine", "env", "gateway")
"""The roles, in the order `plan` places them."""
_EPS = 1e-6  # Ray keeps resources to 1e-4; sums of fractions must not fail on rounding


class LayoutError(ValueError):
    """A layout the cluster cannot hold (or a run cannot start yet): the message names the role,
    what it asked, what the cluster has, and what to change."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RoleLayout(_Section):
    node: str | None = None
    """The node label: a Ray node offering the custom resource `roost_node_<node>`; null: any node."""
    cpus: float = Field(0.0, ge=0)
    """CPUs each replica reserves."""
    gpus: float = Field(0.0, ge=0)
    """GPUs each replica reserves (a fraction shares one GPU, colocated mode only)."""


class TrainerLayout(RoleLayout):
    """The trainer's ranks (trainer.tp * trainer.dp of them)."""

    cpus: float = Field(1.0, ge=0)
    """CPUs per rank (its torch threads, unless trainer.threads says)."""


class ReplicatedLayout(RoleLayout):
    replicas: int = Field(1, ge=1)
    """How many of this role the run starts (every engine replica behind its one gateway; every env
    server, each played against by its share of the rollout workers)."""
    max_replicas: int | None = Field(None, ge=1)
    """Up to how many while the run goes on: a node that joins the cluster with room for one more
    (its label, its CPUs and GPUs), and holds none of the run's replicas yet, gets one at the next
    step's start. None: `replicas`, no growth."""

    @model_validator(mode="after")
    def _room_to_grow(self) -> ReplicatedLayout:
        if self.max_replicas is not None and self.max_replicas < self.replicas:
            raise ValueError(
                f"max_replicas is {self.max_replicas} but replicas is {self.replicas}: the run starts "
                f"{self.replicas}; set max_replicas to at least that, or leave it out"
            )
        return self

    @property
    def most(self) -> int:
        return self.max_replicas or self.replicas


class LayoutConfig(_Section):
    mode: Literal["colocated", "split"] = "colocated"
    """colocated: engine replicas go on the trainer's nodes (replica i with rank i mod ranks) and
    may share its GPUs; split: every role on GPUs of its own, on the nodes its `node` names."""
    trainer: TrainerLayout = TrainerLayout()
    engine: ReplicatedLayout = ReplicatedLayout()
    env: ReplicatedLayout = ReplicatedLayout()
    """Env servers (their worker processes are env.server.workers, inside the server's reservation)."""
    gateway: RoleLayout = RoleLayout()

    @model_validator(mode="after")
    def _mode_consistent(self) -> LayoutConfig:
        if self.mode == "colocated" and self.engine.node not in (None, self.trainer.node):
            raise ValueError(
                f"placement.layout.engine.node is {self.engine.node!r} but colocated mode puts the engine on "
                f"the trainer's nodes ({self.trainer.node!r}); leave engine.node out, or set mode: split"
            )
        if self.mode == "colocated" and self.engine.most > self.engine.replicas:
            raise ValueError(
                "placement.layout.engine.max_replicas grows the engines on nodes that join, but colocated mode "
                "keeps each engine with a trainer rank; set mode: split, or leave max_replicas out"
            )
        if self.mode == "split":
            for role in ("trainer", "engine"):
                gpus = getattr(self, role).gpus
                if gpus != int(gpus):
                    raise ValueError(
                        f"placement.layout.{role}.gpus is {gpus:g}, a share of a GPU, but split mode gives each "
                        "role GPUs of its own; use a whole number, or set mode: colocated"
                    )
        return self


@dataclass(frozen=True)
class Node:
    """A Ray node as the planner sees it: its total resources (`ray.nodes()`'s `Resources`)."""

    id: str
    address: str
    resources: dict[str, float]

    @property
    def labels(self) -> list[str]:
        return sorted(
            k.removeprefix(NODE_RESOURCE_PREFIX) for k in self.resources if k.startswith(NODE_RESOURCE_PREFIX)
        )

    @property
    def name(self) -> str:
        return f"{self.address} ({self.id[:8]})"

    def describe(self) -> str:
        labels = f" [{', '.join(self.labels)}]" if self.labels else ""
        return f"{self.name}{labels}: {self.resources.get('CPU', 0):g} CPU, {self.resources.get('GPU', 0):g} GPU"


def nodes_from_ray(ray_nodes: Iterable[dict[str, Any]]) -> list[Node]:
    """The alive nodes of `ray.nodes()`."""
    return [
        Node(n["NodeID"], n.get("NodeManagerAddress", "?"), dict(n.get("Resources", {})))
        for n in ray_nodes
        if n.get("Alive", True)
    ]


@dataclass(frozen=True)
class Assignment:
    """One replica of a role, on one node, with what it reserves there."""

    role: str
    index: int
    node: Node
    cpus: float
    gpus: float

    def ray_options(self) -> dict[str, Any]:
        """Options for `ActorClass.options(...)`: the replica's resources, pinned to its node."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return {
            "num_cpus": self.cpus,
            "num_gpus": self.gpus,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(self.node.id, soft=False),
        }


@dataclass(frozen=True)
class Plan:
    mode: str
    nodes: tuple[Node, ...]
    assignments: tuple[Assignment, ...]

    def of(self, role: str) -> list[Assignment]:
        return [a for a in self.assignments if a.role == role]

    def render(self) -> str:
        """The plan as printed by `roost train --plan` and before a run starts."""
        lines = [f"layout: {self.mode}, {len(self.assignments)} replicas on {len(self.nodes)} node(s)"]
        for node in self.nodes:
            lines.append(f"node {node.describe()}")
            lines += [
                f"  {a.role} {a.index}: {a.cpus:g} CPU, {a.gpus:g} GPU" for a in self.assignments if a.node == node
            ]
        return "\n".join(lines)


@dataclass
class _Free:
    """What is left on each node while replicas are placed."""

    left: dict[str, list[float]] = field(default_factory=dict)

    def fits(self, node: Node, cpus: float, gpus: float) -> bool:
        cpu, gpu = self.left[node.id]
        return cpu + _EPS >= cpus and gpu + _EPS >= gpus

    def take(self, node: Node, cpus: float, gpus: float) -> None:
        self.left[node.id][0] -= cpus
        self.left[node.id][1] -= gpus


def plan(layout: LayoutConfig, nodes: Sequence[Node], trainer_ranks: int = 1) -> Plan:
    """Place every replica of `layout` on `nodes`; raises `LayoutError` where one does not fit."""
    if not nodes:
        raise LayoutError("the Ray cluster reports no alive node; start one (`ray start --head`) and plan again")
    free = _Free({n.id: [n.resources.get("CPU", 0.0), n.resources.get("GPU", 0.0)] for n in nodes})
    placed: list[Assignment] = []
    for role, count in _replicas(layout, trainer_ranks):
        spec: RoleLayout = getattr(layout, role)
        candidates = _labelled(role, spec, nodes)
        for index in range(count):
            if role == "engine" and layout.mode == "colocated":
                candidates = [placed[index % trainer_ranks].node]
            node = next((n for n in candidates if free.fits(n, spec.cpus, spec.gpus)), None)
            if node is None:
                raise LayoutError(_no_room(layout, role, index, count, candidates, free))
            free.take(node, spec.cpus, spec.gpus)
            placed.append(Assignment(role, index, node, spec.cpus, spec.gpus))
    return Plan(layout.mode, tuple(nodes), tuple(placed))


def place_on(layout: LayoutConfig, role: str, index: int, node: Node) -> Assignment | None:
    """Replica `index` of `role` on `node` alone (a node that joined and holds none of the run's
    replicas: its total resources are free), or None where its label or its room does not fit."""
    spec: RoleLayout = getattr(layout, role)
    if spec.node is not None and spec.node not in node.labels:
        return None
    free = _Free({node.id: [node.resources.get("CPU", 0.0), node.resources.get("GPU", 0.0)]})
    if not free.fits(node, spec.cpus, spec.gpus):
        return None
    return Assignment(role, index, node, spec.cpus, spec.gpus)


def _replicas(layout: LayoutConfig, trainer_ranks: int) -> list[tuple[str, int]]:
    """(role, how many) in the order roles are placed."""
    counts = {"trainer": trainer_ranks, "engine": layout.engine.replicas, "env": layout.env.replicas, "gateway": 1}
    return [(role, counts[role]) for role in ROLES]


def _labelled(role: str, spec: RoleLayout, nodes: Sequence[Node]) -> list[Node]:
    if spec.node is None:
        return list(nodes)
    found = [n for n in nodes if spec.node in n.labels]
    if not found:
        resource = NODE_RESOURCE_PREFIX + spec.node
        raise LayoutError(
            f"placement.layout.{role}.node is {spec.node!r}, but no node of the cluster offers the Ray resource "
            f"{resource} (its nodes: {'; '.join(n.describe() for n in nodes)}); start one with "
            f"`ray start --address HEAD:6379 --resources '{json.dumps({resource: 1})}'`, or leave {role}.node out"
        )
    return found


def _no_room(layout: LayoutConfig, role: str, index: int, count: int, nodes: list[Node], free: _Free) -> str:
    spec: RoleLayout = getattr(layout, role)
    colocated = role == "engine" and layout.mode == "colocated"
    where = "the node of the trainer rank it is colocated with" if colocated else _where(spec)
    left = "; ".join(_left(n, free) for n in nodes)
    count_key = "trainer.tp * trainer.dp" if role == "trainer" else f"placement.layout.{role}.replicas"
    # a colocated engine can only go where its rank is: another node would not help
    more = "set placement.layout.mode: split" if colocated else f"add a node with room for it: {_add_node(spec)}"
    return (
        f"placement.layout cannot place {role} replica {index + 1} of {count} ({spec.cpus:g} CPU, {spec.gpus:g} GPU "
        f"on {where}): after the replicas placed before it, {left}. Lower {count_key} or "
        f"placement.layout.{role}.cpus/.gpus, or {more}"
    )


def _where(spec: RoleLayout) -> str:
    return f"a node labelled {spec.node!r}" if spec.node else "any node"


def _left(node: Node, free: _Free) -> str:
    cpu, gpu = free.left[node.id]
    total = node.resources
    return f"{node.name} has {cpu:g} of {total.get('CPU', 0):g} CPU and {gpu:g} of {total.get('GPU', 0):g} GPU left"


def _add_node(spec: RoleLayout) -> str:
    command = "ray start --address HEAD:6379 --num-cpus N --num-gpus N"
    if spec.node is None:
        return command
    return command + " --resources '" + json.dumps({NODE_RESOURCE_PREFIX + spec.node: 1}) + "'"


def recipe_plan(recipe: Recipe, nodes: Sequence[Node]) -> Plan:
    """`plan` for a recipe's layout (`placement.roles()`) and its trainer's tp * dp ranks."""
    try:
        return plan(recipe.placement.roles(), nodes, recipe.trainer.tp * recipe.trainer.dp)
    except LayoutError as exc:
        if recipe.placement.layout is not None:
            raise
        raise LayoutError(
            f"{exc} (this recipe has no placement.layout: placement.trainer_cpus, trainer_gpus and engine_gpus "
            "are its trainer.cpus, trainer.gpus and engine.gpus)"
        ) from None


def describe(recipe: Recipe, the_plan: Plan) -> str:
    """The plan as a run prints it: pinned as shown with `placement.layout`; without one, Ray's
    placement group picks the nodes (as before layouts) and the plan checks the cluster holds the run."""
    if recipe.placement.layout is not None:
        return the_plan.render()
    return (
        f"{the_plan.render()}\n(no placement.layout: Ray's placement group picks the trainer's nodes; "
        "this plan checks that the cluster holds the run)"
    )
