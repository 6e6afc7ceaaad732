"""`roost bench rollout` runs its workload both ways on a real engine and gateway: with
program-awareness on, the programs past the engine's slots are held at their first call."""

from __future__ import annotations

from roost.bench.rollout import RolloutBenchConfig, run_bench


def test_bench_rollout_holds_the_programs_past_the_engines_slots_only_when_on():
    config = RolloutBenchConfig(levels=(3,), programs=3, turns=2, words_per_turn=20, tool_s=0.2, slots=2)
    rows = {row["mode"]: row for row in run_bench(config)["rows"]}
    assert set(rows) == {"off", "on"}
    assert rows["off"]["deferred_programs"] == 0
    assert rows["on"]["deferred_programs"] >= 1 and rows["on"]["let_through_programs"] == 0
    for row in rows.values():
        assert row["episodes_per_min"] > 0 and 0 < row["prefix_hit_rate"] < 1
        assert row["prefilled_tokens"] > 0
