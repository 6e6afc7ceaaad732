"""The OSWorld recipes point at the offline fixture set (the CPU recipe's two-step run, with a
resumed third step, is in tests/trainer/test_recipes_run.py with every other recipe's)."""

from __future__ import annotations

from pathlib import Path

from roost.trainer.recipe import load_recipe

RECIPES = Path(__file__).resolve().parents[2] / "recipes" / "osworld"


def test_the_recipes_point_at_the_fixture_set():
    for name in ("cpu", "gpu"):
        recipe = load_recipe(RECIPES / f"{name}.yaml")
        assert recipe.env.name == "osworld"
        assert recipe.env.prepare == "roost.envs.osworld.prepare:fixtures"
    assert load_recipe(RECIPES / "cpu.yaml").env.kwargs["observation_type"] == "a11y_tree"
