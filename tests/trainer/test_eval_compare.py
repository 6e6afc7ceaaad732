"""Two eval rows of a run compared game by game (the demo's RL gain over SFT and its standard error)."""

from __future__ import annotations

import math

import pytest

from roost.trainer.eval_compare import paired_gain, per_task_success


def test_per_task_success_averages_each_games_episodes():
    assert per_task_success([("a", True), ("b", False), ("a", False), ("c", True)]) == {"a": 0.5, "b": 0.0, "c": 1.0}


def test_paired_gain_is_the_mean_difference_over_shared_games_with_its_standard_error():
    before = {"per_task": {"a": 0.0, "b": 1.0, "c": 0.0, "d": 0.0, "only-before": 1.0}}
    after = {"per_task": {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.0, "only-after": 0.0}}
    gain = paired_gain(before, after)
    # differences 100, 0, 100, 0 over the four shared games: mean 50, sd 57.74, se 28.87
    assert gain.games == 4 and gain.points == pytest.approx(50.0)
    assert gain.stderr == pytest.approx(math.sqrt(10000 / 3) / 2)
    assert str(gain) == "+50.00 ± 28.87 points (4 games)"
    assert paired_gain(after, before).points == pytest.approx(-50.0)


def test_rows_without_per_task_success_or_shared_games_give_no_gain():
    assert paired_gain({"success_rate": 0.2}, {"success_rate": 0.3}) is None  # rows from before per_task
    assert paired_gain({"per_task": {"a": 1.0}}, {"per_task": {"a": 0.0, "b": 1.0}}) is None
