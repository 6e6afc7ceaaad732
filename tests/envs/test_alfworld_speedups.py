"""The TextWorld speed-ups change nothing a player sees."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from roost.envs.alfworld import textworld_speedups

# Plays every game with a fixed random walk (a bad command every fourth step) and prints the
# transcript; `on` installs roost's speed-ups first.
PLAY = """
import json, random, sys
from roost.envs.alfworld import game, textworld_speedups
if sys.argv[1] == "off":
    textworld_speedups.install = lambda: None
play, rng, log = game.AlfworldGame(), random.Random(0), []
for path in sys.argv[2:]:
    state = play.reset(path)
    log.append([state.feedback, state.admissible, state.won])
    for turn in range(10):
        state = play.step("go to the moon" if turn % 4 == 3 else rng.choice(state.admissible))
        log.append([state.feedback, state.admissible, state.won])
print(json.dumps(log))
"""


def _transcript(speedups: str, games: list[str]) -> list:
    done = subprocess.run([sys.executable, "-c", PLAY, speedups, *games], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow
def test_games_play_the_same_with_and_without_the_speedups(alfworld_data: Path):
    games = sorted(str(path) for path in alfworld_data.glob("json_2.1.1/*/*/*/game.tw-pddl"))
    faster = _transcript("on", games)
    assert len(games) == 12 and len(faster) == 12 * 11
    assert faster == _transcript("off", games)
    assert any("Nothing happens" in feedback for feedback, _, _ in faster)


def test_cached_results_are_copies_callers_may_change():
    calls = []

    def parse(text: str, rule_name: str) -> list:
        calls.append(text)
        return [text, rule_name]

    cached = textworld_speedups.cached(parse)
    first = cached("a", rule_name="symbols")
    first.append("changed by the caller")
    assert cached("a", rule_name="symbols") == ["a", "symbols"]
    assert cached("b", rule_name="symbols") == ["b", "symbols"]
    assert calls == ["a", "b"]
