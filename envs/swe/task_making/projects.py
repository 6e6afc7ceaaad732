"""The pinned projects tasks are made from: small pure-Python libraries whose sdists ship their tests.

Each was checked: its sdist downloads with this digest, and its tests pass with only pytest (the
run's plugins off, the project's own `addopts` cleared) before any bug. Three projects are held
out as the `test` split; the others make `train`.

Tried and left out: jmespath 1.1.0, whose sdist lacks the `tests/__init__.py` its test files
import from (`from tests import unittest, OrderedDict`); isodate 0.7.2, whose test ids change from
run to run (its cases are a set of tuples holding None, whose hash is its address on Python 3.11,
so pytest numbers the same case `expected3`, `expected7` or `expected8`), where a task must name
its tests the same when made and when graded.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Project:
    name: str
    """The PyPI name."""
    version: str
    sha256: str
    """Of the sdist file."""
    sources: tuple[str, ...]
    """Files or folders (relative to the sdist's root) where bugs go; test files inside are skipped."""
    tests: tuple[str, ...]
    """What pytest runs (relative to the root)."""
    pythonpath: str = "."
    """Put first on PYTHONPATH, so the unpacked sources shadow any installed copy."""
    ignore: tuple[str, ...] = ()
    """Test files left out (they need packages the tests' environment lacks)."""
    deselect: tuple[str, ...] = ()
    """Test ids left out (they need files or packages the sdist and the tests' environment lack)."""
    env: tuple[tuple[str, str], ...] = ()
    """Variables the project's tests need set (name, value), put in front of the test command."""

    @property
    def slug(self) -> str:
        return self.name.replace("-", "_")


PROJECTS = (
    Project(
        "cachetools",
        "8.0.2",
        "30ac523adfc118b51d2b2e7bad8a0ddb31370dfe2700c7f10ca224f36ccf81e0",
        ("src/cachetools",),
        ("tests",),
        "src",
    ),
    Project(
        "boltons",
        "26.2.0",
        "d39cfd15c1a1c3bd4d705c82252fa9edb8e4f5e8cc039f8e39afac7b1b47e92c",
        ("boltons",),
        ("tests",),
    ),
    Project(
        "inflection",
        "0.5.1",
        "1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417",
        ("inflection",),
        ("test_inflection.py",),
    ),
    Project(
        "munch", "4.0.0", "542cb151461263216a4e37c3fd9afc425feeaf38aaa3025cd2a981fadb422235", ("munch",), ("tests",)
    ),
    Project(
        "six",
        "1.17.0",
        "ff70335d468e7eb6ec65b95b99d3a2836546063f63acc5171de367e834932a81",
        ("six.py",),
        ("test_six.py",),
    ),
    Project(
        "tabulate",
        "0.10.0",
        "e2cfde8f79420f6deeffdeda9aaec3b6bc5abce947655d17ac662b126e48a60d",
        ("tabulate",),
        ("test",),
    ),
    Project(
        "toolz",
        "1.2.0",
        "9667a038e9d6ecba37995e26cb2f59ec6420b6ad8dd9677de59db9b956b08490",
        ("toolz",),
        ("toolz/tests",),
    ),
    Project(
        "parse", "1.22.4", "706d458feed5a81b02768d3156e8070baf6cee7d150a3a3c0cd43101a875c3b5", ("parse",), ("tests",)
    ),
    Project(
        "semver",
        "3.1.2",
        "bea193552413194252d33ff26ce0962b76669bd1c6fb17e8e203ac37f072feaf",
        ("src/semver",),
        ("tests",),
        "src",
    ),
    Project(
        "wcwidth",
        "0.9.4",
        "fd8d57d3cdfe570e3265c8fab1885c24e34ef40889c0759c0c304a19e9835954",
        ("wcwidth",),
        ("tests",),
        # its conftest fails every test unless the C extension is built, or this names pure Python
        env=(("WCWIDTH_PYTHON", "1"),),
    ),
    Project(
        "more-itertools",
        "11.2.1",
        "cbf08fd0af284dc69718b9b76a8e6203df624d70209ea511e4219d350c856f63",
        ("more_itertools",),
        ("tests",),
    ),
    Project(
        "toml",
        "0.10.2",
        "b3bda1d108d5dd99f4a20d24d9c348e91c4db7ab1b749200bded2f839ccbe68f",
        ("toml",),
        ("tests",),
        # they read the toml-test suite, a git submodule the sdist leaves out
        deselect=("tests/test_api.py::test_valid_tests", "tests/test_api.py::test_invalid_tests"),
    ),
    Project(
        "pyparsing",
        "3.3.3",
        "928ae7e20211f3b6f3915a72f06a0cfd29ab9d24279dd6346b6b1a7146397d36",
        ("pyparsing",),
        # two of its files (80 tests, ~3 s): the whole suite takes ~40 s a run, and its examples'
        # and diagrams' tests need pyparsing[diagrams]
        ("tests/test_simple_unit.py", "tests/test_util.py"),
    ),
)
TEST_PROJECTS = frozenset({"inflection", "munch", "toml"})
"""Held out: their tasks form the `test` split."""


def split_of(project: str) -> str:
    return "test" if project in TEST_PROJECTS else "train"


def select(names: list[str] | None) -> list[Project]:
    """The named projects (all when None); an unknown name raises with the known ones."""
    if not names:
        return list(PROJECTS)
    known = {p.name: p for p in PROJECTS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown project(s) {unknown}; pinned: {', '.join(sorted(known))}")
    return [known[n] for n in names]
