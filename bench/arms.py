"""`roost bench arms`: three ways to spend the same RL wall time from one SFT checkpoint.

    roost bench arms --minutes 6 > arms.json      # ~35 min on 2 idle cores (games cached: ~30)
    roost bench arms --quick                      # a few minutes: the same pipeline, cut down

On the demo's ALFWorld setting (`roost demo`'s games, model, SFT and eval; `cli/demo_pipeline.py`):

 1. gigpo       `roost demo` itself: SFT, then the demo's RL (GiGPO, GRPO's episode advantage
                plus a per-turn one) for `--minutes` of RL wall time (`schedule.max_minutes`)
 2. ppo_critic  from arm 1's SFT checkpoint: PPO with GAE over a trained value head
                (`algorithm.critic`, the first step warming the head up alone), same minutes
 3. distill     from arm 1's SFT checkpoint: on-policy distillation, each sampled token's
                advantage the reverse KL to a teacher, arm 1's RL checkpoint (the stronger model
                of the same tokenizer), with no env reward; same minutes

Every arm ends with the demo's seeded eval on the same held-out games, so arms compare game by
game: each arm's gain over SFT and each pair's difference, with standard errors
(`roost.trainer.eval_compare`). The budget is checked after each step, so an arm runs over it by
at most one step; the JSON says how many steps and seconds each arm trained. Arms 2 and 3 first
evaluate their start on the first games, which must equal arm 1's after-SFT results there
(`start_matches_sft`): the same weights, the same seeds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from roost.cli.demo_pipeline import DemoConfig, demo_recipe
from roost.trainer.recipe import Recipe, validate_recipe

ARMS = ("gigpo", "ppo_critic", "distill")
STEP_CAP = 1000
"""`schedule.steps` for every arm: high enough that the time budget is what ends each one."""


@dataclass(frozen=True)
class ArmsConfig:
    minutes: float = 6.0
    """RL wall time per arm (the demo's 26 steps take ~8 minutes on 2 idle cores)."""
    out: Path = Path("runs/arms")
    quick: bool = False
    """The demo's `--quick` sizes: checks the pipeline in a few minutes, measures nothing."""

    def demo(self) -> DemoConfig:
        config = DemoConfig.quick() if self.quick else DemoConfig()
        return replace(config, rl_steps=STEP_CAP)


def gigpo_recipe(config: ArmsConfig, cache: Path) -> Recipe:
    """The demo's recipe with the time budget; the SFT checkpoint kept beside the final one."""
    data = recipe_dict(demo_recipe(config.demo(), config.out / "gigpo", cache))
    data["name"] = "arms-gigpo"
    data["schedule"].update(max_minutes=config.minutes, keep_checkpoints=2)
    return validate_recipe(data, "roost bench arms")


def arm_recipe(arm: str, config: ArmsConfig, cache: Path, sft: Path, teacher: Path) -> Recipe:
    """Arm `arm` (ppo_critic or distill) from the SFT checkpoint's weights, the demo's settings otherwise."""
    data = recipe_dict(demo_recipe(config.demo(), config.out / arm, cache))
    data["name"] = f"arms-{arm}"
    data["model"] = {"path": str(sft)}
    data["sft"] = None
    data["schedule"].update(max_minutes=config.minutes)
    if arm == "ppo_critic":
        data["algorithm"]["advantage"] = {"name": "gae", "options": {"gamma": 1.0, "lam": 0.95}}
        data["algorithm"]["critic"] = {"value_clip": 0.2, "lr": 1.0e-3, "warmup_steps": 1}
    elif arm == "distill":
        data["teachers"] = {"strong": {"model": str(teacher), "engine": data["engine"]}}
        data["distill"] = {"routes": [{"teacher": "strong"}], "coef": 1.0, "env_weight": 0.0}
    else:
        raise ValueError(f"unknown arm {arm!r}; expected one of {', '.join(ARMS[1:])}")
    return validate_recipe(data, "roost bench arms")


def recipe_dict(recipe: Recipe) -> dict[str, Any]:
    """A validated recipe as the plain dict it came from (to change and validate again)."""
    return json.loads(recipe.model_dump_json(exclude_none=True))


def run_bench(config: ArmsConfig, console: Any) -> dict[str, Any]:
    """Run the three arms one after another (progress on `console`, a rich Console); the JSON result."""
    from roost.rollout.engine.tiny_model import roost_home
    from roost.trainer.progress import progress_hooks
    from roost.trainer.rl.loop import train

    cache = roost_home().expanduser() / "demo"
    summaries = {}
    with progress_hooks(console) as hooks:
        console.print(f"[bold]arm 1/3: gigpo[/] (SFT, then {config.minutes} min of RL)")
        summaries["gigpo"] = train(fresh(gigpo_recipe(config, cache)), hooks)
        first = summaries["gigpo"].run_dir
        sft, teacher = first / "checkpoints" / "sft" / "hf", _final_weights(first)
        for number, arm in enumerate(ARMS[1:], start=2):
            console.print(f"[bold]arm {number}/3: {arm}[/] ({config.minutes} min of RL)")
            summaries[arm] = train(fresh(arm_recipe(arm, config, cache, sft, teacher)), hooks)
    return report(config, {arm: (s.run_dir, s.evals) for arm, s in summaries.items()})


def fresh(recipe: Recipe) -> Recipe:
    """The recipe, its output folder emptied first (each bench run starts over)."""
    import shutil

    shutil.rmtree(recipe.output_dir, ignore_errors=True)
    return recipe


def _final_weights(run_dir: Path) -> Path:
    from roost.trainer.checkpoint import RunState

    state = RunState.load(run_dir)
    if state is None or state.checkpoint is None:
        raise RuntimeError(f"{run_dir} saved no checkpoint: the distillation arm has no teacher")
    return Path(state.hf_weights or "")


def report(config: ArmsConfig, runs: dict[str, tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    """Each arm's final success, its gain over the SFT checkpoint and each pair's difference,
    all paired game by game over the held-out games every final eval played."""
    from roost.trainer.eval_compare import paired_gain

    sft_eval = runs["gigpo"][1]["after_sft"]
    arms = []
    for arm, (run_dir, evals) in runs.items():
        steps = rl_steps(run_dir)
        arms.append(
            {
                "arm": arm,
                "steps": len(steps),
                "rl_s": round(sum(m["step_s"] for m in steps), 1),
                "success_rate": evals["final"]["success_rate"],
                "games": evals["final"]["scored"],
                "gain_over_sft": gain_json(paired_gain(sft_eval, evals["final"])),
                # arm 1's SFT row is the reference itself
                "start_matches_sft": None if arm == "gigpo" else _agrees(evals.get("before") or {}, sft_eval),
            }
        )
    pairs = [
        {"a": a, "b": b, "b_minus_a": gain_json(paired_gain(runs[a][1]["final"], runs[b][1]["final"]))}
        for i, a in enumerate(runs)
        for b in list(runs)[i + 1 :]
    ]
    return {
        "minutes": config.minutes,
        "quick": config.quick,
        "sft": {"success_rate": sft_eval["success_rate"], "games": sft_eval["scored"]},
        "arms": arms,
        "pairs": pairs,
    }


def rl_steps(run_dir: Path) -> list[dict[str, Any]]:
    """The run's RL step metrics (metrics.jsonl's `rl` rows)."""
    path = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    return [row for row in rows if row.get("stage") == "rl"]


def gain_json(gain: Any) -> dict[str, Any] | None:
    """A `PairedGain` as JSON, rounded to hundredths of a point."""
    return (
        None
        if gain is None
        else {"points": round(gain.points, 2), "stderr": round(gain.stderr, 2), "games": gain.games}
    )


def _agrees(start: dict[str, Any], sft_eval: dict[str, Any]) -> bool:
    """Whether an arm's start row equals the SFT row on every game both played."""
    mine, theirs = start.get("per_task") or {}, sft_eval.get("per_task") or {}
    shared = set(mine) & set(theirs)
    return bool(shared) and all(mine[t] == theirs[t] for t in shared)
