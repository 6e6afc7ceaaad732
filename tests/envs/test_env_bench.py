"""`roost bench env` measures what it says (a short run; real figures come from the command)."""

from __future__ import annotations

from pathlib import Path

import pytest

from roost.bench.env import BenchConfig, as_json, run_bench

pytestmark = pytest.mark.slow


async def test_bench_reports_rates_and_memory_per_concurrency(alfworld_data: Path):
    config = BenchConfig("alfworld", (f"data_dir={alfworld_data}",), concurrency=(1, 2), seconds=0.5, workers=1)
    results = as_json(await run_bench(config))
    assert [r["concurrency"] for r in results] == [1, 2]
    for r in results:
        assert r["resets_per_s"] > 0 and r["steps_per_s"] > 0 and r["rss_mb_per_episode"] >= 0
