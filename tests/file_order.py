"""Longest test files first, so that `-n 2 --dist loadfile` ends with short files on both workers.

xdist hands out whole files in the order it is given (with `--no-loadscope-reorder`; its
default orders them by test count, which put the few-test, minutes-long files such as recipe
runs and image builds last, one worker running them while the other sat idle). Sorting the
files by their measured time, longest first, is the classic longest-processing-time rule.

The times live in tests/file_durations.json (file path → seconds, from a full run's JUnit
report). A file without a time counts as `UNKNOWN_S`. Refresh them after a full run with
`python tests/file_order.py junit.xml > tests/file_durations.json`.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

DURATIONS = Path(__file__).with_name("file_durations.json")
UNKNOWN_S = 30.0


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    """The recorded seconds per test file (paths relative to the repository root); {} without a file."""
    return json.loads(path.read_text()) if path.is_file() else {}


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def order_by_duration(items: list, durations: dict[str, float]) -> list:
    """`items` (pytest items) regrouped by file, files longest first; order within a file is kept."""
    by_file: dict[str, list] = defaultdict(list)
    for item in items:
        by_file[file_of(item.nodeid)].append(item)
    files = sorted(by_file, key=lambda name: -durations.get(name, UNKNOWN_S))
    return [item for name in files for item in by_file[name]]


def durations_from_junit(report: Path) -> dict[str, float]:
    """Seconds per test file from a JUnit XML report (each case's setup, call and teardown)."""
    totals: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).iter("testcase"):
        module = case.get("classname", "").split(".")
        # classname is the dotted module path, then the class if any: keep the part naming a file.
        parts = [part for part in module if part]
        for end in range(len(parts), 0, -1):
            candidate = "/".join(parts[:end]) + ".py"
            if Path(candidate).is_file():
                totals[candidate] += float(case.get("time", 0.0))
                break
    return {name: round(seconds, 1) for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
    print(json.dumps(durations_from_junit(Path(sys.argv[1])), indent=1))
