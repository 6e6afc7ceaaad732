"""`roost bench arms` and `roost bench staleness`: the recipes each arm and run trains with, the
report's pairing, and the refusals (the runs themselves take half an hour and more: their figures
are in docs/benchmarks.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roost.bench.arms import ArmsConfig, arm_recipe, gigpo_recipe, report
from roost.bench.staleness import StalenessConfig, result_row, run_recipe


def test_each_arm_trains_the_demo_from_one_sft_checkpoint_for_the_same_minutes(tmp_path):
    config = ArmsConfig(minutes=2.5, out=tmp_path)
    first = gigpo_recipe(config, tmp_path / "cache")
    assert first.schedule.max_minutes == 2.5 and first.sft is not None and first.model.small_vocab is not None
    assert first.algorithm.advantage.name == "gigpo" and first.schedule.keep_checkpoints >= 2  # SFT's kept
    sft, teacher = tmp_path / "sft", tmp_path / "teacher"
    critic = arm_recipe("ppo_critic", config, tmp_path / "cache", sft, teacher)
    distill = arm_recipe("distill", config, tmp_path / "cache", sft, teacher)
    for recipe in (critic, distill):
        assert recipe.model.path == str(sft) and recipe.sft is None and recipe.schedule.max_minutes == 2.5
        assert recipe.eval == first.eval  # the same seeded held-out games
    assert critic.algorithm.advantage.name == "gae" and critic.algorithm.critic is not None
    assert distill.teachers["strong"].model == str(teacher)
    assert distill.distill is not None and distill.distill.env_weight == 0.0
    with pytest.raises(ValueError, match="unknown arm"):
        arm_recipe("dpo", config, tmp_path, sft, teacher)


def test_the_arms_report_pairs_every_arm_with_the_sft_row_game_by_game(tmp_path):
    def row(wins: list[int]) -> dict:
        return {
            "success_rate": sum(wins) / len(wins),
            "scored": len(wins),
            "per_task": {f"g{i}": w for i, w in enumerate(wins)},
        }

    sft = [1, 0, 0, 0]
    runs = {}
    for arm, final in (("gigpo", [1, 1, 0, 0]), ("ppo_critic", [1, 0, 0, 0]), ("distill", [1, 1, 1, 0])):
        folder = tmp_path / arm
        folder.mkdir()
        (folder / "metrics.jsonl").write_text(
            "\n".join(json.dumps({"stage": "rl", "step": s, "step_s": 10.0}) for s in (1, 2)) + "\n"
        )
        evals = {"final": row(final), "before": row(sft[:2] if arm != "ppo_critic" else [0, 0])}
        if arm == "gigpo":
            evals["after_sft"] = row(sft)
        runs[arm] = (folder, evals)
    result = report(ArmsConfig(out=tmp_path), runs)
    arms = {a["arm"]: a for a in result["arms"]}
    assert arms["gigpo"]["gain_over_sft"]["points"] == 25.0 and arms["distill"]["gain_over_sft"]["points"] == 50.0
    assert arms["gigpo"]["steps"] == 2 and arms["gigpo"]["rl_s"] == 20.0
    assert arms["gigpo"]["start_matches_sft"] is None
    assert arms["distill"]["start_matches_sft"] is True and arms["ppo_critic"]["start_matches_sft"] is False
    pairs = {(p["a"], p["b"]): p["b_minus_a"]["points"] for p in result["pairs"]}
    assert pairs == {("gigpo", "ppo_critic"): -25.0, ("gigpo", "distill"): 25.0, ("ppo_critic", "distill"): 50.0}


def sft_run(folder: Path) -> Path:
    (folder / "checkpoints" / "sft" / "hf").mkdir(parents=True)
    (folder / "checkpoints" / "sft" / "hf" / "config.json").write_text("{}")
    (folder / "evals.json").write_text(json.dumps({"after_sft": {"per_task": {}}}))
    return folder


def test_a_staleness_run_is_the_demo_in_async_mode_with_its_bound_and_correction(tmp_path):
    config = StalenessConfig(sft_run(tmp_path / "arms"), (0, 6), ("none", "tis", "icepop"), 3.0, tmp_path / "out")
    none, tis, icepop = (run_recipe(config, 6, c) for c in ("none", "tis", "icepop"))
    for recipe in (none, tis, icepop):
        assert recipe.algorithm.mode == "async" and recipe.algorithm.max_staleness == 6
        assert recipe.model.path == str(config.sft_weights) and recipe.schedule.max_minutes == 3.0
    assert (none.trainer.loss.tis_cap, none.trainer.loss.correction) == (None, None)
    assert (tis.trainer.loss.tis_cap, tis.trainer.loss.correction) == (2.0, None)
    assert icepop.trainer.loss.tis_cap is None and icepop.trainer.loss.correction.name == "icepop"
    assert run_recipe(config, 0, "none").algorithm.max_staleness == 0
    # CISPO is a loss: its clipped ratio, taken against the rollout policy (against recomputed old
    # logprobs it would be 1 at a step's one update), is its weight
    cispo = run_recipe(config, 3, "cispo")
    assert (cispo.trainer.loss.kind, cispo.trainer.loss.tis_cap, cispo.trainer.loss.correction) == ("cispo", None, None)
    assert (cispo.trainer.old_logprobs, cispo.algorithm.updates_per_batch) == ("rollout", 1)
    # recomputed old logprobs, one update a step: ρ = exp(old - rollout) carries the staleness
    assert (tis.trainer.old_logprobs, tis.algorithm.updates_per_batch) == ("recompute", 1)
    demo = StalenessConfig(config.from_run, (1,), ("tis",), 3.0, tmp_path / "out", old_logprobs="rollout")
    assert (
        run_recipe(demo, 1, "tis").trainer.old_logprobs,
        run_recipe(demo, 1, "tis").algorithm.updates_per_batch,
    ) == (
        "rollout",
        2,
    )


def test_the_staleness_bench_refuses_what_it_cannot_run(tmp_path):
    with pytest.raises(ValueError, match="holds no SFT checkpoint"):
        StalenessConfig(tmp_path)
    with pytest.raises(ValueError, match="unknown correction 'kpop'"):
        StalenessConfig(sft_run(tmp_path / "arms"), corrections=("none", "kpop"))


def test_a_staleness_row_reports_the_gap_its_steps_saw_and_flags_a_collapse():
    steps = [
        {"step_s": 10.0, "staleness": 1.0, "staleness_max": 2, "mismatch_kl": 0.02, "ratio_p05": 0.8,
         "ratio_p95": 1.1, "masked_fraction": 0.0, "entropy": 0.2},
        {"step_s": 12.5, "staleness": 2.0, "staleness_max": 3, "mismatch_kl": 0.04, "ratio_p05": 0.6,
         "ratio_p95": 1.3, "masked_fraction": 0.1, "entropy": 0.1},
    ]  # fmt: skip
    sft = {"success_rate": 0.5, "per_task": {f"t{k}": float(k % 2) for k in range(40)}}
    lost = {"success_rate": 0.0, "per_task": {f"t{k}": 0.0 for k in range(40)}}
    row = result_row(3, "none", steps, lost, sft)
    assert (row["steps"], row["rl_s"], row["mean_staleness"], row["max_staleness_seen"]) == (2, 22.5, 1.5, 3)
    assert (row["mismatch_kl"], row["ratio_p05"], row["ratio_p95"], row["masked_fraction"]) == (0.03, 0.7, 1.2, 0.05)
    assert row["gain_over_sft"]["points"] == -50.0 and row["collapsed"] and row["last_entropy"] == 0.1
    assert not result_row(3, "tis", steps, sft, sft)["collapsed"]  # no change: no collapse
    # a ratio against the rollout logprobs themselves leaves no gap to report
    cispo = result_row(3, "cispo", steps, sft, sft, against="rollout")
    assert cispo["ratio_against"] == "rollout" and cispo["mismatch_kl"] is None and cispo["ratio_p95"] is None
    assert row["ratio_against"] == "recompute"
