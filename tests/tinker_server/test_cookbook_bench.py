"""`roost bench tinker --json` runs end to end at tiny sizes and reports what docs/benchmarks.md shows
(the figures themselves come from the command)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_bench_tinker_reports_rates_and_the_sampler_save():
    command = [sys.executable, "-m", "roost.cli.main", "bench", "tinker", "--json"]
    done = subprocess.run(
        [*command, "--concurrency", "1,2", "--steps", "1", "--batch", "1", "--seq-len", "8"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    for mode in ("lora", "full_weight"):
        measured = report[mode]
        assert [row["clients"] for row in measured["rows"]] == [1, 2], mode
        for row in measured["rows"]:
            assert row["forward_backward_tokens_per_s"] > 0 and row["optim_step_s_median"] > 0
        assert measured["sampler_save"]["seconds"] > 0
    # A full-weight save holds the tiny model's float32 weights, tens of MB; a LoRA save the adapter
    # alone (the engine loads it onto the base model), a few MB.
    assert report["full_weight"]["sampler_save"]["bytes"] > 10_000_000
    assert 0 < report["lora"]["sampler_save"]["bytes"] < report["full_weight"]["sampler_save"]["bytes"] / 5
