"""The suite's own file order: longest measured files first, JUnit times summed per file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from roost.tests.file_order import UNKNOWN_S, durations_from_junit, order_by_duration


@dataclass
class Item:
    nodeid: str


def test_files_go_longest_first_keeping_their_own_order() -> None:
    items = [Item("tests/a.py::x"), Item("tests/b.py::y"), Item("tests/a.py::z"), Item("tests/c.py::w")]
    durations = {"tests/a.py": 5.0, "tests/b.py": 90.0}
    ordered = [item.nodeid for item in order_by_duration(items, durations)]
    # c.py has no time: it counts as UNKNOWN_S, between b (90 s) and a (5 s).
    assert UNKNOWN_S < 90.0 and UNKNOWN_S > 5.0
    assert ordered == ["tests/b.py::y", "tests/c.py::w", "tests/a.py::x", "tests/a.py::z"]


def test_junit_times_sum_per_file(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "tests" / "rollout").mkdir(parents=True)
    (tmp_path / "tests" / "rollout" / "test_g.py").write_text("")
    (tmp_path / "tests" / "test_top.py").write_text("")
    report = tmp_path / "junit.xml"
    report.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="tests.rollout.test_g" name="a" time="1.25"/>'
        '<testcase classname="tests.rollout.test_g.TestK" name="b" time="2.5"/>'
        '<testcase classname="tests.test_top" name="c" time="0.5"/>'
        "</testsuite></testsuites>"
    )
    monkeypatch.chdir(tmp_path)
    assert durations_from_junit(report) == {"tests/rollout/test_g.py": 3.8, "tests/test_top.py": 0.5}
