"""Recipes: validation names the bad key and what is allowed; overrides and `base:` merge; every
shipped recipe validates."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from roost.trainer.recipe import RecipeError, load_recipe, parse_overrides, validate_recipe

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
MINIMAL = {"name": "t", "env": {"name": "alfworld"}}


def write(tmp_path: Path, name: str, data: dict) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_minimal_recipe_gets_defaults_grouped_by_component():
    recipe = validate_recipe(MINIMAL)
    assert recipe.trainer.loss.kind == "ppo" and recipe.algorithm.advantage.name == "grpo"
    assert recipe.algorithm.mode == "sync" and recipe.rollout.group_size == 4
    assert recipe.output_dir == Path("runs/t")


def test_an_unknown_key_is_named_with_the_keys_allowed_there():
    with pytest.raises(RecipeError) as exc:
        validate_recipe({**MINIMAL, "trainer": {"lrr": 1e-5}}, "my.yaml")
    message = str(exc.value)
    assert "my.yaml" in message and "trainer.lrr: unknown key" in message
    assert "lr," in message and "token_budget" in message


def test_a_bad_value_names_the_key_and_the_allowed_values():
    with pytest.raises(RecipeError) as exc:
        validate_recipe({**MINIMAL, "algorithm": {"mode": "sometimes"}})
    assert "algorithm.mode" in str(exc.value) and "'sync' or 'async'" in str(exc.value)
    with pytest.raises(RecipeError, match="rollout.group_size"):
        validate_recipe({**MINIMAL, "rollout": {"group_size": 0}})
    with pytest.raises(RecipeError, match="env: required"):
        validate_recipe({"name": "t"})
    with pytest.raises(RecipeError, match="unknown advantage estimator 'gipgo': use one of grpo, .*gigpo"):
        validate_recipe({**MINIMAL, "algorithm": {"advantage": {"name": "gipgo"}}})
    assert validate_recipe({**MINIMAL, "algorithm": {"advantage": {"name": "my_credit:split"}}})
    with pytest.raises(RecipeError, match="'grpo' has no option equal_outcomes: it takes scale, eps, equal_rewards"):
        validate_recipe(
            {**MINIMAL, "algorithm": {"advantage": {"name": "grpo", "options": {"equal_outcomes": "drop"}}}}
        )


def test_overrides_take_dotted_paths_yaml_values_and_short_names(tmp_path):
    path = write(tmp_path, "r.yaml", MINIMAL)
    recipe = load_recipe(
        path,
        [
            "steps=2",
            "trainer.lr=3e-5",
            "agent.args={temperature: 0.5}",
            "agent.agents=[planner, executor]",
            "algorithm.per_agent.planner.name=rloo",
        ],
    )
    assert recipe.schedule.steps == 2 and recipe.trainer.lr == 3e-5
    assert recipe.agent.args == {"temperature": 0.5}
    assert recipe.algorithm.per_agent["planner"].name == "rloo"
    assert parse_overrides(["a.b=[1, 2]"]) == {"a": {"b": [1, 2]}}
    with pytest.raises(RecipeError, match="not KEY=VALUE"):
        load_recipe(path, ["steps"])
    with pytest.raises(RecipeError, match="schedule.stepz: unknown key"):
        load_recipe(path, ["schedule.stepz=3"])


def test_base_recipes_merge_and_loops_are_refused(tmp_path):
    write(tmp_path, "gpu.yaml", {**MINIMAL, "trainer": {"lr": 1e-6, "tp": 2}, "rollout": {"group_size": 8}})
    cpu = write(tmp_path, "cpu.yaml", {"base": "gpu.yaml", "name": "t-cpu", "trainer": {"tp": 1}})
    recipe = load_recipe(cpu)
    assert (recipe.name, recipe.trainer.tp, recipe.trainer.lr, recipe.rollout.group_size) == ("t-cpu", 1, 1e-6, 8)
    write(tmp_path, "a.yaml", {"base": "b.yaml"})
    write(tmp_path, "b.yaml", {"base": "a.yaml"})
    with pytest.raises(RecipeError, match="loops"):
        load_recipe(tmp_path / "a.yaml")
    with pytest.raises(RecipeError, match="no recipe at"):
        load_recipe(tmp_path / "missing.yaml")


def test_cross_section_rules_are_checked():
    with pytest.raises(RecipeError, match="small_vocab"):
        validate_recipe({**MINIMAL, "model": {"small_vocab": {}}})
    with pytest.raises(RecipeError, match="old_logprobs: rollout"):
        validate_recipe({**MINIMAL, "algorithm": {"updates_per_batch": 2}})
    validate_recipe({**MINIMAL, "algorithm": {"updates_per_batch": 2}, "trainer": {"old_logprobs": "rollout"}})
    with pytest.raises(RecipeError, match="per_agent names agent"):
        validate_recipe({**MINIMAL, "algorithm": {"per_agent": {"planner": {"name": "rloo"}}}})
    with pytest.raises(RecipeError, match="set the seed under eval.args"):
        validate_recipe({**MINIMAL, "agent": {"harness": "tool", "args": {"seed": 0}}})
    validate_recipe({**MINIMAL, "agent": {"harness": "tool"}, "eval": {"args": {"seed": 0}}})


SHIPPED = sorted(p for p in RECIPES.glob("*/**/*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=[str(p.relative_to(RECIPES)) for p in SHIPPED])
def test_every_shipped_recipe_validates_and_has_a_readme(path):
    recipe = load_recipe(path, ["steps=2"])
    assert recipe.schedule.steps == 2
    assert (path.parent / "README.md").is_file()


def test_every_training_recipe_has_a_cpu_and_a_gpu_variant():
    folders = {p.parent for p in SHIPPED if p.name == "cpu.yaml"}
    assert len(folders) >= 5, folders
    for folder in folders:
        # the GPU variant is gpu.yaml (webshop/grpo keeps its recipe.yaml, which the env tests read)
        assert (folder / "gpu.yaml").is_file() or (folder / "recipe.yaml").is_file(), folder
        cpu = load_recipe(folder / "cpu.yaml")
        assert cpu.engine.backend == "embedded" and cpu.placement.trainer_gpus == 0


def test_the_demo_and_its_quick_variant_are_valid_recipes(tmp_path):
    from roost.cli.demo_pipeline import DemoConfig, demo_recipe

    for config in (DemoConfig(), DemoConfig.quick()):
        recipe = demo_recipe(config, tmp_path / "run", tmp_path / "cache")
        assert recipe.schedule.steps == config.rl_steps and recipe.sft.steps == config.sft_steps
        assert recipe.rollout.concurrency == config.groups_per_step * config.group_size
        assert recipe.algorithm.updates_per_batch == config.rl_updates_per_batch > 1
        assert recipe.trainer.old_logprobs == "rollout" and recipe.eval.episodes == config.heldout_games


def test_the_demo_holds_replies_to_admissible_commands_unless_told_not_to(tmp_path):
    from roost.cli.demo_pipeline import DemoConfig, demo_recipe

    free = demo_recipe(DemoConfig(allowed_replies=False), tmp_path / "run", tmp_path / "cache")
    held = demo_recipe(DemoConfig(), tmp_path / "run", tmp_path / "cache")
    assert "allowed_replies_from" not in free.agent.args
    # agent.args reach RL rollouts and, under eval.args, every eval
    assert held.agent.args["allowed_replies_from"] == "admissible_commands"
    assert "allowed_replies_from" not in held.eval.args
    # held replies train over the commands' tokens and need no KL term; free ones keep it
    assert held.trainer.grammar_mask and held.trainer.loss.kl_coef == 0.0
    assert free.trainer.loss.kl_coef == 0.05


def test_weight_sync_over_http_is_for_the_embedded_engine_only():
    assert validate_recipe(MINIMAL).engine.weight_sync == "disk"
    assert validate_recipe({**MINIMAL, "engine": {"weight_sync": "http"}}).engine.weight_sync == "http"
    with pytest.raises(RecipeError, match="http sends tensors to roost's embedded engine only; a vllm engine"):
        validate_recipe({**MINIMAL, "engine": {"backend": "vllm", "weight_sync": "http"}})


def test_a_generative_reward_names_a_judge_the_recipe_defines_and_a_rubric_that_reads():
    judged = {
        **MINIMAL,
        "judges": {"critic": {"model": "tiny", "engine": {"backend": "embedded"}}},
        "reward": {"judge": "critic", "pattern": r"VERDICT=([0-9]+)", "scale": [1, 5], "mode": "add", "weight": 0.5},
    }
    recipe = validate_recipe(judged)
    assert (recipe.judges["critic"].model, recipe.reward.scale, recipe.reward.mode) == ("tiny", (1.0, 5.0), "add")
    assert validate_recipe({**judged, "judges": {"critic": {}}}).judges["critic"].model == "student"
    with pytest.raises(
        RecipeError, match=r"reward.judge names judge 'critc', which `judges` does not define \(\['critic'\]\)"
    ):
        validate_recipe({**judged, "reward": {"judge": "critc"}})
    with pytest.raises(RecipeError, match="reward.scale: .*must go from low to high"):
        validate_recipe({**judged, "reward": {"judge": "critic", "scale": [5, 1]}})
    with pytest.raises(RecipeError, match="reward.pattern: .*needs a group around the score"):
        validate_recipe({**judged, "reward": {"judge": "critic", "pattern": "SCORE"}})
    with pytest.raises(RecipeError, match="reward.rubric: unknown key; allowed here: .*judge, .*prompt"):
        validate_recipe({**judged, "reward": {"judge": "critic", "rubric": "be fair"}})


def test_routing_replay_needs_the_gateway_to_record_routing():
    recipe = load_recipe(RECIPES / "webshop" / "grpo" / "moe.yaml")
    assert recipe.gateway.record_routing and recipe.trainer.routing_replay and recipe.model.path == "tiny-moe"
    with pytest.raises(RecipeError, match="set gateway.record_routing: true"):
        load_recipe(RECIPES / "webshop" / "grpo" / "moe.yaml", ["gateway.record_routing=false"])
