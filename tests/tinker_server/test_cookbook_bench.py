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
    # The rows are filed under what the server trains; the other mode says why it has none.
    measured, other = ("lora", "full_weight") if report["capabilities"]["lora"] else ("full_weight", "lora")
    assert isinstance(report[other], str)
    if other == "lora":
        assert report["lora"] == "not served"
    assert [row["clients"] for row in report[measured]] == [1, 2]
    for row in report[measured]:
        assert row["forward_backward_tokens_per_s"] > 0 and row["optim_step_s_median"] > 0
    # A full-weight save holds the tiny model's float32 weights, tens of MB; an adapter, far less.
    assert report["sampler_save"]["bytes"] > (0 if measured == "lora" else 10_000_000)
    assert report["sampler_save"]["seconds"] > 0
