"""The OSWorld CPU recipe trains two steps through the whole stack: the fixture set on local
desktops, the tool agent through the gateway with the tiny model, GRPO on Ray."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from roost.trainer.recipe import load_recipe

RECIPES = Path(__file__).resolve().parents[2] / "recipes" / "osworld"


def test_the_recipes_point_at_the_fixture_set():
    for name in ("cpu", "gpu"):
        recipe = load_recipe(RECIPES / f"{name}.yaml")
        assert recipe.env.name == "osworld"
        assert recipe.env.prepare == "roost.trainer.recipe_prepare:osworld_fixtures"
    assert load_recipe(RECIPES / "cpu.yaml").env.kwargs["observation_type"] == "a11y_tree"


@pytest.fixture
def local_ray():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.mark.slow
def test_the_cpu_recipe_trains_two_steps(tmp_path, local_ray):
    if shutil.which("Xvfb") is None or shutil.which("lxterminal") is None:
        pytest.skip("the fixture set's desktop needs Xvfb and LXTerminal (.ci/apt-packages.txt)")
    from roost.trainer.rl.loop import train

    run_dir = tmp_path / "run"
    recipe = load_recipe(RECIPES / "cpu.yaml", ["steps=2", f"output_dir={run_dir}", "eval.split=null",
                                                f"env.prepare_args={{out: {tmp_path / 'tasks'}}}"])
    summary = train(recipe)
    assert summary.steps == 2
    rl = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rl = [m for m in rl if m["stage"] == "rl"]
    assert [m["step"] for m in rl] == [1, 2]
    assert all(m["infra_error"] == 0 for m in rl), rl
