"""The layout planner on a real Ray cluster of two labelled nodes (the `ray_cluster` fixture):
replicas start on the nodes the plan names, `roost train --plan` prints the plan or says why the
cluster cannot hold it, and a run pins each role where planned and refuses what it cannot start."""

from __future__ import annotations

import re

import pytest
import yaml
from typer.testing import CliRunner

from roost.cli.main import build_app
from roost.tests.ray_cluster import NodeProbe
from roost.trainer.layout import LayoutConfig, LayoutError, nodes_from_ray, plan
from roost.trainer.recipe import validate_recipe
from roost.trainer.rl.placement import placement, planned_placement

pytestmark = pytest.mark.timeout(600)  # the cluster's nodes start slowly on a loaded machine

SPLIT = {
    "mode": "split",
    "trainer": {"node": "trainer", "cpus": 1},
    "engine": {"node": "rollout", "cpus": 1},
    "env": {"node": "rollout"},
}


def labelled(nodes, label: str):
    return next(n for n in nodes if label in n.labels)


def test_each_replica_starts_on_the_node_the_plan_names(ray_cluster):
    import ray

    nodes = nodes_from_ray(ray.nodes())
    assert sorted(label for n in nodes for label in n.labels) == ["rollout", "trainer"]
    the_plan = plan(LayoutConfig.model_validate(SPLIT), nodes)
    assert [(a.role, a.node) for a in the_plan.assignments][:3] == [
        ("trainer", labelled(nodes, "trainer")),
        ("engine", labelled(nodes, "rollout")),
        ("env", labelled(nodes, "rollout")),
    ]
    actors = [ray.remote(NodeProbe).options(**a.ray_options()).remote() for a in the_plan.assignments]
    try:
        # both nodes' one CPU taken (trainer, engine), and still every replica started where planned
        assert ray.get([actor.node.remote() for actor in actors], timeout=120) == [
            a.node.id for a in the_plan.assignments
        ]
    finally:
        for actor in actors:
            ray.kill(actor)


def write_recipe(tmp_path, cluster, layout) -> str:
    path = tmp_path / "recipe.yaml"
    recipe = {"name": "t", "env": {"name": "alfworld"}, "placement": {"ray_address": cluster.address, "layout": layout}}
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


def test_roost_train_plan_prints_the_plan_or_why_the_cluster_cannot_hold_it(ray_cluster, tmp_path):
    import ray

    rollout = labelled(nodes_from_ray(ray.nodes()), "rollout")
    result = CliRunner().invoke(build_app(), ["train", "--plan", write_recipe(tmp_path, ray_cluster, SPLIT)])
    assert result.exit_code == 0, result.output
    assert "layout: split, 4 replicas on 2 node(s)" in result.output
    assert f"node {rollout.describe()}\n  engine 0: 1 CPU, 0 GPU\n  env 0: 0 CPU, 0 GPU" in result.output
    assert "[rollout]: 1 CPU, 0 GPU" in rollout.describe()

    too_big = {**SPLIT, "engine": {"node": "rollout", "gpus": 1}}
    result = CliRunner().invoke(build_app(), ["train", "--plan", write_recipe(tmp_path, ray_cluster, too_big)])
    assert result.exit_code == 2
    assert "cannot place engine replica 1 of 1 (0 CPU, 1 GPU on a node labelled 'rollout')" in result.output
    assert f"{rollout.name} has 1 of 1 CPU and 0 of 0 GPU left" in result.output


def test_a_run_pins_each_role_where_planned_and_refuses_what_it_cannot_start(ray_cluster):
    import ray

    nodes = nodes_from_ray(ray.nodes())
    here = next(n for n in nodes if n.id == ray.get_runtime_context().get_node_id())
    other = next(n for n in nodes if n is not here)
    label, away_label = here.labels[0], other.labels[0]
    # which of the two nodes the driver attached to is Ray's choice: the layout follows it
    layout = {
        "mode": "split",
        "trainer": {"node": label, "cpus": 1},
        "engine": {"node": away_label, "replicas": 2},
        "env": {"node": away_label},
        "gateway": {"node": label},
    }
    where = planned_placement(plan(LayoutConfig.model_validate(layout), nodes))
    assert [options["scheduling_strategy"].node_id for options in where.engines] == [other.id, other.id]
    assert (where.envs[0]["scheduling_strategy"].node_id, where.gateway["scheduling_strategy"].node_id) == (
        other.id,
        here.id,
    )
    assert [where.away(options) for options in (where.trainer[0], *where.engines, *where.envs, where.gateway)] == [
        False,
        True,
        True,
        True,
        False,
    ]
    assert where.local()["scheduling_strategy"].node_id == here.id

    def recipe(**engine):
        return validate_recipe(
            {"name": "t", "env": {"name": "alfworld"}, "engine": engine, "placement": {"layout": layout}}
        )

    # weights cross to the engines' node over HTTP only
    cluster_plan = plan(LayoutConfig.model_validate(layout), nodes)
    with pytest.raises(LayoutError, match="set engine.weight_sync: http, or put the engine on this node"):
        placement(recipe(), cluster_plan)
    with pytest.raises(LayoutError, match="engine.backend is vllm: roost train sends weights across nodes"):
        placement(recipe(backend="vllm"), cluster_plan)
    assert len(placement(recipe(weight_sync="http"), cluster_plan).engines) == 2

    trainer_away = {**layout, "trainer": {"node": away_label, "cpus": 1}}
    with pytest.raises(LayoutError, match=re.escape(f"the plan puts trainer 0 on {other.name}, not on this node")):
        planned_placement(plan(LayoutConfig.model_validate(trainer_away), nodes))
    # each rollout worker plays against one env server: two servers need two workers
    two_envs = {**layout, "env": {"node": away_label, "replicas": 2}}
    two_plan = plan(LayoutConfig.model_validate(two_envs), nodes)
    assert len(planned_placement(two_plan).envs) == 2

    def with_workers(workers: int):
        data = {"name": "t", "env": {"name": "alfworld"}, "engine": {"weight_sync": "http"}}
        return validate_recipe({**data, "rollout": {"workers": workers}, "placement": {"layout": two_envs}})

    with pytest.raises(
        LayoutError, match="env.replicas is 2 but rollout.workers is 1: .* set rollout.workers to at least 2"
    ):
        placement(with_workers(1), two_plan)
    assert len(placement(with_workers(2), two_plan).envs) == 2
