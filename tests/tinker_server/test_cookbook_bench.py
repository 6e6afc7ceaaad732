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
    assert [row["clients"] for row in report["full_weight"]] == [1, 2]
    for row in report["full_weight"]:
        assert row["forward_backward_tokens_per_s"] > 0 and row["optim_step_s_median"] > 0
    # The tiny model's weights in float32 are tens of MB; a save that wrote nothing would be 0.
    assert report["sampler_save"]["bytes"] > 10_000_000 and report["sampler_save"]["seconds"] > 0
    # LoRA rows only once the server trains adapters; until then the report says it is not served.
    assert report["capabilities"]["full_weight"] is True
    if not report["capabilities"]["lora"]:
        assert report["lora"] == "not served"
