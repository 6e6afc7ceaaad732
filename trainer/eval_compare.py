"""Two evaluations of one run compared game by game: the gain and its standard error.

    gain = paired_gain(evals["after_sft"], evals["final"])   # from the run's evals.json
    print(gain)                                              # +14.25 ± 2.75 points (400 games)

Each eval row keeps its per-task success rates (`per_task`). Pairing over the same held-out
games removes the spread between easy and hard games from the comparison, so the standard error
is that of the per-game differences, not of two independent rates.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PairedGain:
    points: float
    """Mean per-game difference in success, in percentage points."""
    stderr: float
    """Standard error of that mean, in points (sample standard deviation over sqrt(games))."""
    games: int

    def __str__(self) -> str:
        return f"{self.points:+.2f} ± {self.stderr:.2f} points ({self.games} games)"


def per_task_success(results: Iterable[tuple[str, bool]]) -> dict[str, float]:
    """Each task's success rate over its episodes, from (task id, success) pairs."""
    outcomes: dict[str, list[bool]] = defaultdict(list)
    for task_id, success in results:
        outcomes[task_id].append(success)
    return {task: sum(wins) / len(wins) for task, wins in outcomes.items()}


def paired_gain(before: dict[str, Any], after: dict[str, Any]) -> PairedGain | None:
    """`after` minus `before` over the tasks both eval rows scored; None when fewer than two
    tasks are shared (rows written before `per_task` was kept have none)."""
    first, second = before.get("per_task") or {}, after.get("per_task") or {}
    shared = sorted(set(first) & set(second))
    if len(shared) < 2:
        return None
    diffs = [100.0 * (second[t] - first[t]) for t in shared]
    mean = sum(diffs) / len(diffs)
    variance = sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)
    return PairedGain(mean, math.sqrt(variance / len(diffs)), len(diffs))
