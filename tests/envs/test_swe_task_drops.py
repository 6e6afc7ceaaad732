"""Task making's drops, each with its reason, on a small project of the test's own (a git
repository with a module and its pytest tests): a bug no test catches, one that breaks the whole
suite, one that hangs the tests, and a project whose tests fail before any bug."""

from __future__ import annotations

from pathlib import Path

import pytest

from roost.envs.swe.fixtures import git
from roost.envs.swe.task_making.make import _baseline_problem, _judge
from roost.envs.swe.task_making.mutations import Mutation
from roost.envs.swe.task_making.projects import Project
from roost.envs.swe.task_making.validate import run_tests
from roost.envs.swe.task_making.validate import test_cmd as command_of

LIB = """\
SCALE = 2


def double(x):
    return x * SCALE


def unused(x):
    return x - 1
"""
TESTS = """\
from lib import double


def test_double_two():
    assert double(2) == 4


def test_double_zero():
    assert double(0) == 0
"""
TOY = Project("toy", "0", "", ("lib.py",), ("tests",))


@pytest.fixture
def repo(tmp_path) -> Path:
    (tmp_path / "tests").mkdir()
    (tmp_path / "lib.py").write_text(LIB)
    (tmp_path / "tests" / "test_lib.py").write_text(TESTS)
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "toy")
    return tmp_path


def judged(repo: Path, mutation: Mutation, timeout_s: float = 60.0):
    baseline = run_tests(str(repo), TOY, 60)
    assert _baseline_problem(baseline) is None and len(baseline.passed()) == 2, baseline.output
    result = _judge(repo, mutation, TOY, baseline.passed(), timeout_s)
    assert (repo / "lib.py").read_text() == LIB  # the working copy is restored whatever the verdict
    return result


def test_a_bug_no_test_catches_is_dropped(repo):
    result = judged(repo, Mutation("binary_op", "lib.py", 9, 11, 9, 16, "x + 1"))
    assert result.reason == "no test catches it"


def test_a_bug_that_breaks_every_test_is_dropped(repo):
    result = judged(repo, Mutation("changed_return", "lib.py", 5, 4, 5, 20, "return None"))
    assert result.reason == "it breaks the whole test suite (no test still passes)"


def test_a_bug_that_hangs_the_tests_is_dropped(repo):
    hang = "__import__('time').sleep(600)"
    result = judged(repo, Mutation("off_by_one", "lib.py", 1, 8, 1, 9, hang), timeout_s=5)
    assert result.reason == "the tests hang with it (past 5s)"


def test_a_bug_some_tests_catch_is_kept(repo):
    result = judged(repo, Mutation("off_by_one", "lib.py", 1, 8, 1, 9, "3"))
    assert result.reason is None and result.fail_to_pass == ["tests/test_lib.py::test_double_two"]
    assert result.pass_to_pass == ["tests/test_lib.py::test_double_zero"]
    assert "-SCALE = 3" in result.gold_patch and "+SCALE = 2" in result.gold_patch


def test_a_project_whose_tests_fail_before_any_bug_is_dropped(repo):
    (repo / "lib.py").write_text(LIB.replace("x * SCALE", "x * SCALE if x else 1"))
    problem = _baseline_problem(run_tests(str(repo), TOY, 60))
    assert problem is not None and problem.startswith("1 of its tests fail before any bug"), problem


def test_a_project_whose_tests_need_a_variable_runs_them_with_its_env(repo):
    """As wcwidth's conftest fails every test unless WCWIDTH_PYTHON names its pure-Python mode."""
    (repo / "tests" / "conftest.py").write_text("import os\n\nassert os.environ.get('TOY_MODE') == 'py'\n")
    assert _baseline_problem(run_tests(str(repo), TOY, 60)) is not None
    with_env = Project("toy", "0", "", ("lib.py",), ("tests",), env=(("TOY_MODE", "py"),))
    assert " TOY_MODE=py " in command_of(with_env)  # the task's test_cmd, so grading sets it too
    run = run_tests(str(repo), with_env, 60)
    assert _baseline_problem(run) is None and len(run.passed()) == 2, run.output
