"""`roost bench cluster` on real engines and a real gateway (a short run: one update per transport
for 1 and 2 engines; the figures come from the command itself, docs/benchmarks.md)."""

from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

from roost.bench.cli import register


def _bench_app() -> typer.Typer:
    app, bench = typer.Typer(), typer.Typer()
    app.add_typer(bench, name="bench")
    register(app, bench)
    return app


def test_every_engine_behind_the_gateway_ends_at_the_last_version():
    result = CliRunner().invoke(_bench_app(), ["bench", "cluster", "--engines", "1,2", "--repeats", "1", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["model"] == "tiny" and report["tensor_bytes"] > 0 and "loopback" in report["note"]
    assert [(r["engines"], r["transport"]) for r in report["rows"]] == [
        (1, "disk"),
        (1, "http"),
        (2, "disk"),
        (2, "http"),
    ]
    for row in report["rows"]:
        assert row["s_median"] > 0 and 0 < row["paused_s_median"] <= row["s_median"]
    disk_one, http_one, disk_two, http_two = report["rows"]
    # one folder written whatever the count; each engine reads it, or is sent the weights, once
    assert disk_two["bytes_written"] == disk_one["bytes_written"] >= report["tensor_bytes"]
    assert disk_two["bytes_read"] == 2 * disk_one["bytes_read"]
    assert http_two["bytes_moved"] == 2 * http_one["bytes_moved"] >= 2 * report["tensor_bytes"]
    for ended in report["ended"]:
        count, last = ended["engines"], ended["last_weight_version"]
        assert ended["engine_weight_versions"] == [last] * count  # each engine's own /get_model_info
        assert ended["gateway_weight_version"] == last and ended["gateway_engine_states"] == ["up"] * count
    assert result.stderr.count("cluster bench: ") == 4  # a line as each engine count starts and ends


def test_an_engine_count_below_one_is_refused_before_anything_starts():
    result = CliRunner().invoke(_bench_app(), ["bench", "cluster", "--engines", "0,2"])
    assert result.exit_code == 2
    assert "engine counts must be 1 or more" in result.output
