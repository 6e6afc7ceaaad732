"""The source of roost's offline SWE tasks: small Python packages, each with one real bug.

Each fixture is the buggy package with its passing tests (the base commit), the hidden test
that exposes the bug (becomes `test_patch`, FAIL_TO_PASS) and the fix (becomes `patch`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FixtureRepo:
    name: str
    files: dict[str, str]
    """Path → text at the base commit (bug included, passing tests only)."""
    hidden_tests: dict[str, str]
    """Test file → its text with the bug-exposing test added."""
    fix: dict[str, tuple[str, str]]
    """Source file → (buggy text, fixed text) replaced once."""
    problem: str
    fail_to_pass: list[str]
    pass_to_pass: list[str]


CALC_TESTS = """from calc.stats import mean, spread, total
import pytest


def test_total():
    assert total([1, 2, 3]) == 6


def test_spread():
    assert spread([4, 1, 9]) == 8


def test_mean_of_nothing_raises():
    with pytest.raises(ValueError):
        mean([])
"""

TEXTKIT_TESTS = """from textkit.slug import slugify, title_case


def test_title_case():
    assert title_case("the quick fox") == "The Quick Fox"


def test_slugify_joins_words():
    assert slugify("hello, big world!") == "hello-big-world"
"""

INTERVALS_TESTS = """from intervals.merge import merge, total_length


def test_merge_overlapping():
    assert merge([(2, 6), (1, 5)]) == [(1, 6)]


def test_merge_disjoint():
    assert merge([(5, 6), (1, 2)]) == [(1, 2), (5, 6)]


def test_total_length():
    assert total_length([(1, 4), (2, 5), (10, 11)]) == 5
"""

INVENTORY_TESTS = """import pytest

from inventory.stock import Stock


def test_add_and_count():
    stock = Stock()
    stock.add("apple", 3)
    stock.remove("apple")
    assert stock.count("apple") == 2


def test_remove_too_many_raises():
    stock = Stock()
    stock.add("pear")
    with pytest.raises(ValueError):
        stock.remove("pear", 2)


def test_add_rejects_nonpositive():
    with pytest.raises(ValueError):
        Stock().add("plum", 0)
"""

FIXTURES = (
    FixtureRepo(
        name="calc",
        files={
            "calc/__init__.py": "",
            "calc/stats.py": '''"""Small statistics helpers."""


def total(values):
    return sum(values)


def spread(values):
    return max(values) - min(values)


def mean(values):
    """Arithmetic mean of a non-empty sequence."""
    if not values:
        raise ValueError("mean of an empty sequence")
    return sum(values) / (len(values) - 1)
''',
            "tests/test_stats.py": CALC_TESTS,
        },
        hidden_tests={
            "tests/test_stats.py": CALC_TESTS
            + """

def test_mean():
    assert mean([1, 2, 3]) == 2
    assert mean([5]) == 5
"""
        },
        fix={"calc/stats.py": ("sum(values) / (len(values) - 1)", "sum(values) / len(values)")},
        problem="calc.stats.mean gives wrong answers: mean([1, 2, 3]) returns 3.0 instead of 2.0, and "
        "mean([5]) raises ZeroDivisionError instead of returning 5.",
        fail_to_pass=["tests/test_stats.py::test_mean"],
        pass_to_pass=[
            "tests/test_stats.py::test_total",
            "tests/test_stats.py::test_spread",
            "tests/test_stats.py::test_mean_of_nothing_raises",
        ],
    ),
    FixtureRepo(
        name="textkit",
        files={
            "textkit/__init__.py": "",
            "textkit/slug.py": '''"""Text helpers for titles and URLs."""
import re


def title_case(text):
    return " ".join(word.capitalize() for word in text.split())


def slugify(text):
    """A URL slug: the words of `text`, lowercase, joined by hyphens."""
    words = re.findall(r"[A-Za-z0-9]+", text)
    return "-".join(words)
''',
            "tests/test_slug.py": TEXTKIT_TESTS,
        },
        hidden_tests={
            "tests/test_slug.py": TEXTKIT_TESTS
            + """

def test_slugify_lowercases():
    assert slugify("Hello World") == "hello-world"
"""
        },
        fix={"textkit/slug.py": ('return "-".join(words)', 'return "-".join(word.lower() for word in words)')},
        problem="textkit.slug.slugify keeps capital letters: slugify('Hello World') returns 'Hello-World', "
        "but slugs must be lowercase ('hello-world').",
        fail_to_pass=["tests/test_slug.py::test_slugify_lowercases"],
        pass_to_pass=["tests/test_slug.py::test_title_case", "tests/test_slug.py::test_slugify_joins_words"],
    ),
    FixtureRepo(
        name="intervals",
        files={
            "intervals/__init__.py": "",
            "intervals/merge.py": '''"""Merging closed integer intervals."""


def merge(intervals):
    """Sorted, non-overlapping intervals covering the same points; touching ones are joined."""
    merged = []
    for start, end in sorted(intervals):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def total_length(intervals):
    return sum(end - start for start, end in merge(intervals))
''',
            "tests/test_merge.py": INTERVALS_TESTS,
        },
        hidden_tests={
            "tests/test_merge.py": INTERVALS_TESTS
            + """

def test_merge_touching():
    assert merge([(1, 2), (2, 3)]) == [(1, 3)]
"""
        },
        fix={"intervals/merge.py": ("start < merged[-1][1]", "start <= merged[-1][1]")},
        problem="intervals.merge.merge does not join touching intervals: merge([(1, 2), (2, 3)]) returns "
        "[(1, 2), (2, 3)] but should return [(1, 3)].",
        fail_to_pass=["tests/test_merge.py::test_merge_touching"],
        pass_to_pass=[
            "tests/test_merge.py::test_merge_overlapping",
            "tests/test_merge.py::test_merge_disjoint",
            "tests/test_merge.py::test_total_length",
        ],
    ),
    FixtureRepo(
        name="inventory",
        files={
            "inventory/__init__.py": "",
            "inventory/stock.py": '''"""A stock of countable items."""


class Stock:
    def __init__(self):
        self._counts = {}

    def add(self, item, qty=1):
        if qty <= 0:
            raise ValueError("qty must be positive")
        self._counts[item] = self._counts.get(item, 0) + qty

    def remove(self, item, qty=1):
        have = self._counts.get(item, 0)
        if qty > have:
            raise ValueError(f"only {have} {item} in stock")
        self._counts[item] = have - qty

    def count(self, item):
        return self._counts.get(item, 0)

    def items(self):
        """Items currently in stock, sorted."""
        return sorted(self._counts)
''',
            "tests/test_stock.py": INVENTORY_TESTS,
        },
        hidden_tests={
            "tests/test_stock.py": INVENTORY_TESTS
            + """

def test_removed_items_are_not_listed():
    stock = Stock()
    stock.add("fig", 2)
    stock.add("kiwi")
    stock.remove("fig", 2)
    assert stock.items() == ["kiwi"]
"""
        },
        fix={
            "inventory/stock.py": (
                "        self._counts[item] = have - qty\n",
                "        if qty == have:\n            del self._counts[item]\n"
                "        else:\n            self._counts[item] = have - qty\n",
            )
        },
        problem="inventory.stock.Stock.items() still lists an item after all of it was removed: after "
        "add('fig', 2) and remove('fig', 2), items() returns ['fig'] instead of [].",
        fail_to_pass=["tests/test_stock.py::test_removed_items_are_not_listed"],
        pass_to_pass=[
            "tests/test_stock.py::test_add_and_count",
            "tests/test_stock.py::test_remove_too_many_raises",
            "tests/test_stock.py::test_add_rejects_nonpositive",
        ],
    ),
)
