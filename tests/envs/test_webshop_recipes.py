"""The WebShop recipes parse, and their env settings are ones the env accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from roost.envs.webshop.env import make_factory

RECIPES = Path(__file__).resolve().parents[2] / "recipes" / "webshop"


@pytest.mark.parametrize("name", ["eval", "grpo"])
async def test_recipe_env_settings_make_a_working_env(name):
    assert (RECIPES / name / "README.md").is_file()
    recipe = yaml.safe_load((RECIPES / name / "recipe.yaml").read_text())
    assert recipe["env"]["name"] == "webshop"
    env = make_factory(**recipe["env"]["kwargs"])()
    split = recipe.get("run", recipe["env"]).get("split")
    assert len(await env.tasks(split)) > 0
