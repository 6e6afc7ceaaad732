"""Every shipped CPU recipe trains: two RL steps of each `cpu.yaml` (and of OSWorld's
`cpu_vision.yaml`, tiny-vl seeing screenshots, and the mixture-of-experts
recipe, `webshop/grpo/moe.yaml`, with routing replay) through the real env server,
gateway and embedded engine (rollouts, advantages, a Megatron step, the weights synced into the
engine) and a checkpoint at the end; the demo's recipe (ALFWorld: SFT, then RL) then resumes a
third step from it (resuming is the recipes' shared code: test_rl_loop and test_checkpoint_mirror
resume too). Sizes are cut with the same
`--set` overrides a user would pass; the data is each recipe's own offline fixtures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from roost.tests.trainer.test_rl_loop import local_ray  # noqa: F401 (a fixture)
from roost.trainer.recipe import load_recipe

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # a run of one recipe: ~1-2 min here

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
# Every run: no evaluations, the end checkpointed, quiet.
COMMON = [
    "eval.split=null",
    "schedule.checkpoint_every=2",
    "metrics.console=false",
    "metrics.tensorboard=false",
    "placement.num_cpus=2",
    "trainer.threads=1",
]
SHORT = {
    "alfworld": [
        "env.prepare_args={train: 4, valid_seen: 0, valid_unseen: 0, receptacles: 3, distractors: 1}",
        "sft.data.episodes=4",
        "sft.steps=1",
        "sft.batch_size=4",
        "agent.max_turns=3",
        "rollout.groups_per_step=1",
        "rollout.group_size=2",
        "algorithm.advantage.options={equal_rewards: zero}",
    ],
    "swe": [
        "env.kwargs.max_steps=2",
        "agent.max_turns=2",
        "agent.args.max_tokens=24",
        "rollout.groups_per_step=1",
        "rollout.group_size=2",
    ],
    "hermes": [
        "rollout.groups_per_step=1",
        "agent.max_turns=1",
        "env.kwargs.max_iterations=1",
        "env.kwargs.max_tokens=16",
    ],
    "multi_agent": [
        "env.prepare_args={train: 2, valid_seen: 0, valid_unseen: 0, receptacles: 3, distractors: 1}",
        "agent.max_turns=2",
        "agent.args.max_tokens=16",
        "agent.args.plan_tokens=16",
        "rollout.groups_per_step=1",
        "rollout.group_size=2",
    ],
    "webshop/grpo": [
        "agent.max_turns=2",
        "agent.args.max_tokens=16",
        "rollout.groups_per_step=1",
        "rollout.group_size=2",
    ],
    "osworld": ["env.kwargs.max_steps=2", "agent.max_turns=2", "agent.args.max_tokens=24"],
    # the tiny model earns no reward, so GRPO's advantages are zero: a fixed +1/-1 moves the weights;
    # trained step-wise, each turn's sample with the screenshots of its own tokens, the vision tower
    # too (the engine serves the trained tower after the sync: the mismatch check below)
    "osworld/cpu_vision": [
        "env.kwargs.max_steps=2",
        "agent.max_turns=2",
        "agent.args.max_tokens=24",
        "algorithm.advantage.name=roost.tests.trainer.test_recipes_run:first_against_rest",
        "algorithm.step_wise=true",
        "trainer.freeze_vision_tower=false",
        "trainer.lr=1e-3",
    ],
}
# A recipe other than its folder's cpu.yaml, by its name above.
FILES = {"osworld/cpu_vision": "osworld/cpu_vision.yaml"}
# What each recipe's env needs from the machine (CI installs it: .ci/apt-packages.txt).
NEEDS = {
    "swe": ["bwrap"],
    "hermes": ["bwrap"],
    "osworld": ["Xvfb", "lxterminal"],
    "osworld/cpu_vision": ["Xvfb", "lxterminal"],
}
RESUMED = {"alfworld"}
# Recipes whose samples carry images (a vision-language model seeing screenshots).
SEES = {"osworld/cpu_vision"}


def recipe_overrides(name: str, run_dir: Path, steps: int, tmp_path: Path) -> list[str]:
    extra = [f"env.prepare_args={{out: {tmp_path / 'tasks'}}}"] if name.startswith("osworld") else []
    return [f"steps={steps}", f"output_dir={run_dir}", *COMMON, *SHORT[name], *extra]


def first_against_rest(group, **_options) -> dict:
    """+1 for the group's first session, -1 for the others, whatever the rewards: a gradient to
    follow (the recipe's grpo options, merged into this estimator's, are ignored)."""
    keys = sorted(group.agent_rewards())
    return {key: 1.0 if key == keys[0] else -1.0 for key in keys}


def recipe_path(name: str) -> Path:
    return RECIPES / FILES.get(name, f"{name}/cpu.yaml")


def rl_metrics(run_dir: Path) -> list[dict]:
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [m for m in lines if m["stage"] == "rl"]


@pytest.mark.parametrize("name", list(SHORT))
def test_the_cpu_recipe_trains_two_steps(name, tmp_path, local_ray):  # noqa: F811
    missing = [tool for tool in NEEDS.get(name, []) if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"recipes/{name} needs {', '.join(missing)} (.ci/apt-packages.txt)")
    from roost.trainer.rl.loop import train

    run_dir = tmp_path / "run"
    summary = train(load_recipe(recipe_path(name), recipe_overrides(name, run_dir, 2, tmp_path)))
    assert summary.steps == 2
    rl = rl_metrics(run_dir)
    assert [m["step"] for m in rl] == [1, 2]
    assert all(m["updated"] and m["trained_samples"] > 0 for m in rl), rl
    assert all(m["infra_error"] == 0 for m in rl), rl
    # one new weight version per step, loaded into the engine; the episodes' calls were recorded
    assert rl[1]["weight_version"] == rl[0]["weight_version"] + 1
    assert all(m["rollout_tokens_per_s"] for m in rl), rl
    if name in SEES:  # the screenshots reached the trainer, which scored them as the engine did, and
        # after the first step's update the engine served the weights it was sent
        assert all(m["trained_images"] > 0 and m["grad_norm"] > 0 for m in rl), rl
        # step-wise: a sample a turn, each with the screenshots of its own tokens
        assert all(m["trainer_samples"] > m["trained_samples"] for m in rl), rl
        assert all(m["logprob_mismatch"] < 1e-4 for m in rl), rl
    state = json.loads((run_dir / "state.json").read_text())
    assert (state["step"], state["weight_version"]) == (2, rl[1]["weight_version"])
    assert (run_dir / "checkpoints" / "step-2" / "hf" / "model.safetensors").is_file()
    assert (run_dir / "checkpoints" / "step-2" / "trainer" / "rank-0.pt").is_file()
    if name not in RESUMED:
        return

    resumed = train(load_recipe(recipe_path(name), recipe_overrides(name, run_dir, 3, tmp_path)))
    assert resumed.steps == 3
    rl = rl_metrics(run_dir)
    assert [m["step"] for m in rl] == [1, 2, 3] and rl[2]["updated"]
    assert rl[2]["weight_version"] == rl[1]["weight_version"] + 1
    assert json.loads((run_dir / "state.json").read_text())["step"] == 3


@pytest.mark.parametrize("ranks", [[], ["trainer.dp=2", "trainer.ep=2"]], ids=["one-rank", "ep2"])
def test_the_moe_recipe_trains_two_steps_replaying_the_engines_routing(tmp_path, local_ray, ranks):  # noqa: F811
    """recipes/webshop/grpo/moe.yaml: tiny-moe, the gateway recording routed experts, the trainer
    replaying them (R3) on Megatron's MoE layer; on one trainer rank, and on two holding half the
    experts each (`trainer.ep`)."""
    from roost.trainer.rl.loop import train

    run_dir = tmp_path / "run"
    overrides = [*recipe_overrides("webshop/grpo", run_dir, 2, tmp_path), *ranks]
    summary = train(load_recipe(RECIPES / "webshop" / "grpo" / "moe.yaml", overrides))
    assert summary.steps == 2
    rl = rl_metrics(run_dir)
    assert [m["step"] for m in rl] == [1, 2]
    assert all(m["updated"] and m["trained_samples"] > 0 and m["infra_error"] == 0 for m in rl), rl
    assert all(m["replayed_tokens"] > 0 for m in rl), rl  # the samples carried their routing
    assert rl[1]["weight_version"] == rl[0]["weight_version"] + 1
    assert (run_dir / "checkpoints" / "step-2" / "hf" / "model.safetensors").is_file()
