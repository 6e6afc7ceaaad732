"""Per-step metrics of a training run: to the console, a JSONL file, TensorBoard or W&B.

    logger = MetricsLogger(MetricsConfig(tensorboard=True), run_dir)
    logger.log(step, {"reward": 0.4, "success": 0.38, ...}, stage="rl")
    logger.close()

One JSON object per line in `run_dir/metrics.jsonl` (`{"stage", "step", "time", ...}`),
appended across resumes. TensorBoard (`run_dir/tensorboard`) and W&B (online, or offline under
`run_dir/wandb`) get the numbers as `<stage>/<name>` scalars; both come with roost's `tracking`
extra, and asking for one that is not installed is an error that says what to install.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from roost.outcome import UNSCORED

from .recipe import MetricsConfig

# What the console line shows, in order, with its format.
CONSOLE = [
    ("reward", "reward {:.3f}"),
    ("success", "success {:.2f}"),
    ("success_rate", "success rate {:.2f}"),
    ("invalid_actions", "invalid {:.1f}/ep"),
    ("loss", "loss {:.4f}"),
    ("kl", "kl {:.4f}"),
    ("clip_fraction", "clip {:.3f}"),
    ("entropy", "entropy {:.3f}"),
    ("logprob_mismatch", "mismatch {:.4f}"),
    ("staleness", "stale {:.2f}"),
    ("rollout_tokens_per_s", "{:.0f} tok/s"),
    ("tree_saving", "tree -{:.0%}"),
]
FAULTS = (*(s.value for s in UNSCORED), "dropped_stale", "dropped_groups", "untrainable_calls")


class MetricsLogger:
    def __init__(
        self, config: MetricsConfig, run_dir: Path, *, run_name: str = "roost", echo: Callable[[str], None] = print
    ) -> None:
        self.config = config
        self.echo = echo
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / "metrics.jsonl"
        self._jsonl = self.path.open("a") if config.jsonl else None
        self._tb = _tensorboard(run_dir / "tensorboard") if config.tensorboard else None
        self._wandb = _wandb(config, run_name, run_dir) if config.wandb_project else None
        self._wandb_stages: set[str] = set()

    def log(self, step: int, metrics: dict[str, Any], *, stage: str = "rl") -> None:
        values = {k: v for k, v in metrics.items() if _is_number(v)}
        if self._jsonl is not None:
            self._jsonl.write(
                json.dumps({"stage": stage, "step": step, "time": round(time.time(), 3), **metrics}) + "\n"
            )
            self._jsonl.flush()
        if self._tb is not None:
            for key, value in values.items():
                self._tb.add_scalar(f"{stage}/{key}", value, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb_log(stage, step, values)
        if self.config.console:
            self.echo(console_line(stage, step, values))

    def _wandb_log(self, stage: str, step: int, values: dict[str, float]) -> None:
        # Each stage counts its own steps (SFT 1..N, then RL from 1), but W&B's own step only
        # grows: a row logged at a smaller one is dropped. So each stage's numbers are plotted
        # against `<stage>/step`, and W&B numbers the rows itself.
        if stage not in self._wandb_stages:
            self._wandb.define_metric(f"{stage}/step")
            self._wandb.define_metric(f"{stage}/*", step_metric=f"{stage}/step")
            self._wandb_stages.add(stage)
        self._wandb.log({f"{stage}/step": step, **{f"{stage}/{k}": v for k, v in values.items()}})

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def console_line(stage: str, step: int, values: dict[str, float]) -> str:
    parts = [f"[{stage} {step}]"]
    parts += [fmt.format(values[key]) for key, fmt in CONSOLE if key in values]
    faults = [f"{key} {int(values[key])}" for key in FAULTS if values.get(key)]
    if faults:
        parts.append("left out: " + ", ".join(faults))
    return "  ".join(parts)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _tensorboard(folder: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise RuntimeError(
            "metrics.tensorboard is on but the `tensorboard` package is missing; install "
            "roost's tracking extra (pip install -e '.[tracking]'), or set metrics.tensorboard: "
            "false"
        ) from exc
    return SummaryWriter(str(folder))


def _wandb(config: MetricsConfig, name: str, folder: Path) -> Any:
    try:
        import wandb
    except ImportError as exc:
        raise RuntimeError(
            "metrics.wandb_project is set but the `wandb` package is missing; install roost's "
            "tracking extra (pip install -e '.[tracking]'), or remove metrics.wandb_project"
        ) from exc
    return wandb.init(project=config.wandb_project, name=name, dir=str(folder), mode=config.wandb_mode, resume="allow")
