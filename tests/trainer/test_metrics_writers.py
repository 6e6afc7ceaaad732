"""The trainer's metrics writers (`roost.trainer.metrics`): what a run logs is read back from
TensorBoard's event files and from an offline W&B run, as those tools would read it."""

from __future__ import annotations

import json
import math
import sys

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from roost.tests.trainer.wandb_records import finished_history
from roost.trainer.metrics import MetricsLogger
from roost.trainer.recipe import MetricsConfig

STEPS = [
    ("sft", 1, {"loss": 2.5}),
    ("rl", 1, {"reward": 0.25, "success": 0.5, "kl": 0.01, "split": "train", "skipped": True, "nan": math.nan}),
    ("rl", 2, {"reward": 0.75, "success": 0.625, "kl": 0.02, "split": "train", "skipped": False, "nan": math.nan}),
]


def log_run(config: MetricsConfig, run_dir) -> None:
    logger = MetricsLogger(config, run_dir, run_name="writers-test")
    for stage, step, values in STEPS:
        logger.log(step, values, stage=stage)
    logger.close()


def test_tensorboard_event_files_hold_each_number_as_a_stage_scalar(tmp_path):
    log_run(MetricsConfig(console=False, tensorboard=True), tmp_path)
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["rl/kl", "rl/reward", "rl/success", "sft/loss"]
    assert [(e.step, e.value) for e in events.Scalars("rl/reward")] == [(1, 0.25), (2, 0.75)]
    assert [(e.step, e.value) for e in events.Scalars("rl/success")] == [(1, 0.5), (2, 0.625)]
    assert [(e.step, e.value) for e in events.Scalars("sft/loss")] == [(1, 2.5)]
    # the JSONL file keeps every value, numbers or not
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["stage"], r["step"], r.get("split")) for r in rows] == [
        ("sft", 1, None),
        ("rl", 1, "train"),
        ("rl", 2, "train"),
    ]


def test_an_offline_wandb_run_holds_each_number_as_a_stage_scalar(tmp_path, monkeypatch):
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    log_run(MetricsConfig(console=False, jsonl=False, wandb_project="roost-test", wandb_mode="offline"), tmp_path)
    [run_file] = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    rows = [{k: v for k, v in row.items() if not k.startswith("_")} for row in finished_history(run_file)]
    # one row per log call, each stage on its own step axis (SFT and RL both start at step 1)
    assert rows == [
        {"sft/step": 1, "sft/loss": 2.5},
        {"rl/step": 1, "rl/reward": 0.25, "rl/success": 0.5, "rl/kl": 0.01},
        {"rl/step": 2, "rl/reward": 0.75, "rl/success": 0.625, "rl/kl": 0.02},
    ]


def test_a_writer_whose_package_is_missing_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb now raises ImportError
    with pytest.raises(RuntimeError, match=r"tracking extra \(pip install -e '\.\[tracking\]'\)"):
        MetricsLogger(MetricsConfig(wandb_project="p"), tmp_path)
