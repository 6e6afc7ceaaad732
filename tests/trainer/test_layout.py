"""The role-device planner on given nodes (a pure function), and the recipe's `placement.layout`:
old recipes keep their meaning, a contradictory or unplaceable layout is a clear error."""

from __future__ import annotations

import pytest

from roost.trainer.layout import (
    LayoutConfig,
    LayoutError,
    Node,
    describe,
    nodes_from_ray,
    place_on,
    plan,
    recipe_plan,
)
from roost.trainer.recipe import RecipeError, validate_recipe

MINIMAL = {"name": "t", "env": {"name": "alfworld"}}


def node(name: str, cpus: float, gpus: float = 0, label: str | None = None) -> Node:
    resources = {"CPU": cpus, "GPU": gpus, "memory": 1e9, f"node:{name}": 1.0}
    if label:
        resources[f"roost_node_{label}"] = 1.0
    return Node(f"{name}-node-id", name, resources)


def where(the_plan) -> list[tuple[str, int, str]]:
    return [(a.role, a.index, a.node.address) for a in the_plan.assignments]


def test_a_split_layout_puts_each_role_on_the_nodes_its_label_names():
    layout = LayoutConfig.model_validate(
        {
            "mode": "split",
            "trainer": {"node": "trainer", "cpus": 2, "gpus": 1},
            "engine": {"node": "rollout", "replicas": 2, "gpus": 1},
            "env": {"node": "rollout", "cpus": 1},
        }
    )
    nodes = [node("10.0.0.1", 4, 2, "trainer"), node("10.0.0.2", 2, 2, "rollout")]
    the_plan = plan(layout, nodes, trainer_ranks=2)
    assert where(the_plan) == [
        ("trainer", 0, "10.0.0.1"),
        ("trainer", 1, "10.0.0.1"),
        ("engine", 0, "10.0.0.2"),
        ("engine", 1, "10.0.0.2"),
        ("env", 0, "10.0.0.2"),
        ("gateway", 0, "10.0.0.1"),  # no label: the first node with room
    ]
    engine = the_plan.of("engine")[1]
    assert (engine.cpus, engine.gpus) == (0, 1)
    text = the_plan.render()
    assert "layout: split, 6 replicas on 2 node(s)" in text
    assert "node 10.0.0.2 (10.0.0.2) [rollout]: 2 CPU, 2 GPU\n  engine 0: 0 CPU, 1 GPU" in text


def test_colocated_engines_share_the_gpus_of_the_trainer_ranks_they_sit_with():
    layout = LayoutConfig.model_validate({"trainer": {"gpus": 0.5, "cpus": 1}, "engine": {"gpus": 0.5, "replicas": 2}})
    nodes = [node("a", 1, 1), node("b", 1, 1)]
    the_plan = plan(layout, nodes, trainer_ranks=2)
    # rank 0 fills a's CPU, so rank 1 goes to b; engine i goes with rank i, into the other half GPU
    assert where(the_plan)[:4] == [("trainer", 0, "a"), ("trainer", 1, "b"), ("engine", 0, "a"), ("engine", 1, "b")]
    # engine 2 goes with rank 0 again, whose node has no GPU left
    too_many = "engine replica 3 of 3 .* on the node of the trainer rank it is colocated with.*or set placement.layout.mode: split"
    with pytest.raises(LayoutError, match=too_many):
        plan(layout.model_copy(update={"engine": layout.engine.model_copy(update={"replicas": 3})}), nodes, 2)


def test_a_role_that_does_not_fit_names_what_it_asked_what_is_left_and_the_fix():
    layout = LayoutConfig.model_validate(
        {
            "mode": "split",
            "trainer": {"node": "trainer", "gpus": 1},
            "engine": {"node": "rollout", "gpus": 1, "replicas": 3},
        }
    )
    nodes = [node("10.0.0.1", 8, 1, "trainer"), node("10.0.0.2", 8, 2, "rollout")]
    with pytest.raises(LayoutError) as exc:
        plan(layout, nodes)
    message = str(exc.value)
    assert "cannot place engine replica 3 of 3 (0 CPU, 1 GPU on a node labelled 'rollout')" in message
    assert "10.0.0.2 (10.0.0.2) has 8 of 8 CPU and 0 of 2 GPU left" in message
    assert "10.0.0.1" not in message  # only the nodes it may go on
    assert "Lower placement.layout.engine.replicas" in message
    assert """--resources '{"roost_node_rollout": 1}'""" in message


def test_a_label_no_node_offers_is_named_with_the_resource_and_the_command_that_adds_it():
    layout = LayoutConfig.model_validate({"mode": "split", "engine": {"node": "judge"}})
    with pytest.raises(LayoutError) as exc:
        plan(layout, [node("10.0.0.1", 2, 0, "trainer")])
    message = str(exc.value)
    assert "placement.layout.engine.node is 'judge'" in message and "roost_node_judge" in message
    assert "10.0.0.1 (10.0.0.1) [trainer]: 2 CPU, 0 GPU" in message
    assert """ray start --address HEAD:6379 --resources '{"roost_node_judge": 1}'""" in message
    with pytest.raises(LayoutError, match="no alive node"):
        plan(layout, [])


def test_ray_nodes_become_planner_nodes_and_dead_ones_are_left_out():
    ray_nodes = [
        {"NodeID": "abc123def456", "Alive": True, "NodeManagerAddress": "10.0.0.1", "Resources": {"CPU": 2.0}},
        {"NodeID": "dead00000000", "Alive": False, "NodeManagerAddress": "10.0.0.9", "Resources": {"CPU": 64.0}},
    ]
    assert nodes_from_ray(ray_nodes) == [Node("abc123def456", "10.0.0.1", {"CPU": 2.0})]


def test_a_recipe_without_a_layout_plans_what_its_placement_fields_say():
    recipe = validate_recipe(
        {**MINIMAL, "trainer": {"dp": 2}, "placement": {"colocate": True, "trainer_gpus": 1, "engine_gpus": 1}}
    )
    layout = recipe.placement.roles()
    assert (layout.mode, layout.trainer.cpus, layout.trainer.gpus, layout.engine.gpus) == ("colocated", 1.0, 1.0, 1.0)
    # as the placement group did: rank 0's bundle holds its GPU and the engine's
    the_plan = recipe_plan(recipe, [node("a", 4, 3)])
    assert [(a.role, a.gpus) for a in the_plan.assignments][:3] == [("trainer", 1), ("trainer", 1), ("engine", 1)]
    assert "Ray's placement group picks" in describe(recipe, the_plan)
    with pytest.raises(LayoutError, match="no placement.layout: placement.trainer_cpus, trainer_gpus and engine_gpus"):
        recipe_plan(recipe, [node("a", 4, 2)])
    # a split recipe of shares of GPUs, valid before layouts, stays valid
    assert validate_recipe({**MINIMAL, "placement": {"colocate": False, "engine_gpus": 0.5}}).placement.roles()


def test_a_layout_is_said_once_and_its_modes_are_kept_consistent():
    with pytest.raises(RecipeError, match="placement sets colocate, engine_gpus and placement.layout; say it once"):
        validate_recipe({**MINIMAL, "placement": {"colocate": False, "engine_gpus": 1, "layout": {}}})
    with pytest.raises(RecipeError, match="colocated mode puts the engine on the trainer's nodes"):
        validate_recipe({**MINIMAL, "placement": {"layout": {"engine": {"node": "rollout"}}}})
    with pytest.raises(RecipeError, match="placement.layout.engine.gpus is 0.5, a share of a GPU, but split mode"):
        validate_recipe({**MINIMAL, "placement": {"layout": {"mode": "split", "engine": {"gpus": 0.5}}}})
    with pytest.raises(RecipeError, match="placement.layout.engine.replicas"):
        validate_recipe({**MINIMAL, "placement": {"layout": {"engine": {"replicas": 0}}}})
    with pytest.raises(
        RecipeError, match="placement.layout.gateway.replicas: unknown key; allowed here: cpus, gpus, node"
    ):
        validate_recipe({**MINIMAL, "placement": {"layout": {"gateway": {"replicas": 2}}}})
    recipe = validate_recipe({**MINIMAL, "placement": {"layout": {"trainer": {"cpus": 2}}}})
    assert recipe.placement.roles() is recipe.placement.layout and recipe.placement.layout.trainer.cpus == 2


def test_a_layout_that_grows_is_checked_and_a_joined_node_takes_one_more_where_it_fits():
    with pytest.raises(RecipeError, match="max_replicas is 1 but replicas is 2"):
        validate_recipe(
            {**MINIMAL, "placement": {"layout": {"mode": "split", "engine": {"replicas": 2, "max_replicas": 1}}}}
        )
    with pytest.raises(RecipeError, match="colocated mode keeps each engine with a trainer rank"):
        validate_recipe({**MINIMAL, "placement": {"layout": {"engine": {"max_replicas": 2}}}})
    layout = LayoutConfig.model_validate(
        {"mode": "split", "engine": {"node": "rollout", "gpus": 1, "max_replicas": 3}, "env": {"cpus": 2}}
    )
    assert (layout.engine.replicas, layout.engine.most, layout.env.most) == (1, 3, 1)
    joined = node("10.0.0.9", 4, 1, "rollout")
    one_more = place_on(layout, "engine", 1, joined)
    assert (one_more.role, one_more.index, one_more.node, one_more.gpus) == ("engine", 1, joined, 1)
    assert place_on(layout, "engine", 1, node("10.0.0.8", 4, 1, "env")) is None  # not its label
    assert place_on(layout, "engine", 1, node("10.0.0.7", 4, 0, "rollout")) is None  # no GPU there
    assert place_on(layout, "env", 1, node("10.0.0.6", 1)) is None  # one CPU of the two it asks


def test_a_run_that_may_grow_its_env_servers_needs_a_rollout_worker_for_each():
    from roost.trainer.rl.placement import Placement, check_env_servers

    grows = {"mode": "split", "env": {"max_replicas": 3}}
    recipe = validate_recipe({**MINIMAL, "rollout": {"workers": 2}, "placement": {"layout": grows}})
    with pytest.raises(LayoutError, match="env.max_replicas is 3 but rollout.workers is 2: .* at least 3"):
        check_env_servers(recipe, Placement([{}], [{}], [{}]))
    enough = validate_recipe({**MINIMAL, "rollout": {"workers": 3}, "placement": {"layout": grows}})
    check_env_servers(enough, Placement([{}], [{}], [{}]))
