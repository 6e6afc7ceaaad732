"""`roost bench staleness`: async RL at several staleness bounds, with and without an off-policy correction.

    roost bench staleness --from-run runs/arms/gigpo --staleness 0,1,3,6 --corrections none,tis

Every run starts from the SFT checkpoint of `--from-run` (a `roost bench arms` run's gigpo arm,
which keeps it) with the demo's RL settings (`cli/demo_pipeline.py`: GiGPO, PPO's clip against
the rollout policy, two epochs a batch), in `algorithm.mode: async` with
`algorithm.max_staleness` set to each bound: rollouts never stop, weights are swapped in while
episodes run, and a sample is trained on while its oldest token is at most that many weight
versions old. The step's old logprobs are recomputed by the trainer before its one update
(`--old-logprobs recompute`, the default), so each token's gap to the stale rollout policy,
ρ = exp(old − rollout), is what the correction sees: `none` (no weight: the plain policy gradient
on stale samples), `tis` (the demo's token TIS, cap 2) or any preset of
`roost.trainer.corrections` (`icepop`, `mis`, `geo_mask`, `seq_tis`, `outlier_mask`) at its
default thresholds. `cispo` is a loss, not a weight (`trainer.loss.kind: cispo`, MiniMax-M1's
−sg(clip(ratio, 1 − clip_low, 1 + clip_high)) · A · log p, the demo's clip 0.2 / 0.28): its run
takes the ratio against the rollout policy (`old_logprobs: rollout`, still one update a step), so
its weight is clip(ρ) and the row's gap columns, measured against the same rollout logprobs, are
empty (`ratio_against: rollout`). `--old-logprobs rollout` keeps the demo's loss instead (two PPO epochs, the
ratio and its clip against the rollout policy): there ρ is 1 by construction and every
correction is a no-op. Each run gets
`--minutes` of RL wall time, then the demo's seeded eval on the held-out games, paired game by
game with the SFT checkpoint's own eval in `--from-run`. `collapsed` marks a run whose
held-out success fell below the SFT checkpoint's by more than two standard errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roost.bench.arms import fresh, gain_json, recipe_dict, rl_steps
from roost.cli.demo_pipeline import DemoConfig, demo_recipe
from roost.trainer.recipe import Recipe, validate_recipe

CORRECTIONS = ("none", "tis", "seq_tis", "mis", "geo_mask", "icepop", "outlier_mask", "cispo")


@dataclass(frozen=True)
class StalenessConfig:
    from_run: Path
    staleness: tuple[int, ...] = (0, 1, 3, 6)
    corrections: tuple[str, ...] = ("none", "tis")
    minutes: float = 4.0
    out: Path = Path("runs/staleness")
    old_logprobs: str = "recompute"

    def __post_init__(self) -> None:
        if self.old_logprobs not in ("recompute", "rollout"):
            raise ValueError(f"old_logprobs is recompute or rollout; got {self.old_logprobs!r}")
        unknown = [c for c in self.corrections if c not in CORRECTIONS]
        if unknown:
            raise ValueError(f"unknown correction {unknown[0]!r}; choose from {', '.join(CORRECTIONS)}")
        if any(k < 0 for k in self.staleness):
            raise ValueError(f"staleness bounds are weight versions, 0 or more; got {list(self.staleness)}")
        if not (self.sft_weights / "config.json").is_file() or not (self.from_run / "evals.json").is_file():
            raise ValueError(
                f"{self.from_run} holds no SFT checkpoint (checkpoints/sft/hf) and evals.json: point --from-run "
                "at a `roost bench arms` run's gigpo folder, which keeps them"
            )

    @property
    def sft_weights(self) -> Path:
        return self.from_run / "checkpoints" / "sft" / "hf"


def loss_correction(name: str) -> dict[str, Any]:
    """The `trainer.loss` fields of a correction: none, the demo's token TIS, CISPO's loss, or a named preset."""
    if name == "none":
        return {"tis_cap": None}
    if name == "tis":
        return {"tis_cap": 2.0}
    if name == "cispo":
        return {"tis_cap": None, "kind": "cispo"}
    return {"tis_cap": None, "correction": {"name": name}}


def run_recipe(config: StalenessConfig, staleness: int, correction: str) -> Recipe:
    label = f"s{staleness}-{correction}"
    data = recipe_dict(demo_recipe(DemoConfig(rl_steps=1000), config.out / label, config.out / "cache"))
    data["name"] = f"staleness-{label}"
    data["model"] = {"path": str(config.sft_weights)}
    data["sft"] = None
    data["schedule"].update(max_minutes=config.minutes)
    data["algorithm"].update(mode="async", max_staleness=staleness)
    if config.old_logprobs == "recompute":  # one update a batch: PPO's ratio starts at 1, ρ carries the staleness
        data["trainer"]["old_logprobs"] = ratio_against(config, correction)
        data["algorithm"]["updates_per_batch"] = 1
    data["trainer"]["loss"] = {**data["trainer"]["loss"], **loss_correction(correction)}
    return validate_recipe(data, "roost bench staleness")


def ratio_against(config: StalenessConfig, correction: str) -> str:
    """The old logprobs a run's ratio is taken against: CISPO weighs by its own clipped ratio, so
    under `recompute` (where that ratio would be 1) it takes it against the rollout policy."""
    return "rollout" if correction == "cispo" else config.old_logprobs


def run_bench(config: StalenessConfig, console: Any) -> dict[str, Any]:
    """Every (staleness, correction) run in turn, progress on `console`; the JSON result."""
    from roost.trainer.checkpoint import load_evals
    from roost.trainer.progress import progress_hooks
    from roost.trainer.rl.loop import train

    sft_eval = load_evals(config.from_run)["after_sft"]
    rows = []
    runs = [(k, c) for k in config.staleness for c in config.corrections]
    with progress_hooks(console) as hooks:
        for number, (staleness, correction) in enumerate(runs, start=1):
            console.print(f"[bold]run {number}/{len(runs)}: staleness {staleness}, correction {correction}[/]")
            summary = train(fresh(run_recipe(config, staleness, correction)), hooks)
            final = summary.evals["final"]
            steps = rl_steps(summary.run_dir)
            rows.append(result_row(staleness, correction, steps, final, sft_eval, ratio_against(config, correction)))
    return {
        "minutes": config.minutes,
        "old_logprobs": config.old_logprobs,
        "from_run": str(config.from_run),
        "sft": {"success_rate": sft_eval["success_rate"], "games": sft_eval["scored"]},
        "rows": rows,
    }


def result_row(
    staleness: int,
    correction: str,
    steps: list[dict[str, Any]],
    final: dict[str, Any],
    sft_eval: dict[str, Any],
    against: str = "recompute",
) -> dict[str, Any]:
    """One run's row: its steps and the staleness they saw, the rollout/trainer gap (mismatch KL,
    ρ's 5th and 95th percentiles, the share a correction masked: means over the steps; None where
    the ratio was taken `against` the rollout logprobs themselves, which leaves no gap to measure),
    its held-out success and gain over the SFT checkpoint, paired game by game, and whether it collapsed."""
    from roost.trainer.eval_compare import paired_gain

    gain = paired_gain(sft_eval, final)
    return {
        "staleness": staleness,
        "correction": correction,
        "steps": len(steps),
        "rl_s": round(sum(m["step_s"] for m in steps), 1),
        "mean_staleness": _mean(m.get("staleness") for m in steps),
        "max_staleness_seen": max((m.get("staleness_max", 0) for m in steps), default=0),
        "ratio_against": against,
        **{
            key: None if against == "rollout" else _mean(m.get(key) for m in steps)
            for key in ("mismatch_kl", "ratio_p05", "ratio_p95", "masked_fraction")
        },
        "success_rate": final["success_rate"],
        "gain_over_sft": gain_json(gain),
        "collapsed": gain is not None and gain.points < -2 * gain.stderr,
        "last_entropy": steps[-1].get("entropy") if steps else None,
    }


def _mean(values: Any) -> float | None:
    kept = [v for v in values if v is not None]
    return round(sum(kept) / len(kept), 3) if kept else None
