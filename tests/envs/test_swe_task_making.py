"""Task making from a real PyPI sdist (inflection, cached under $ROOST_HOME): validated, graded, reproducible."""

from __future__ import annotations

import pytest

from roost.envs.swe.grading import grade
from roost.envs.swe.task_making.make import make_project
from roost.envs.swe.task_making.projects import select
from roost.envs.swe.task_making.sdist import cache_dir, task_repo
from roost.envs.swe.task_making.validate import run_tests
from roost.envs.swe.task_sandbox import with_host_python
from roost.sandboxes import SandboxConfig
from roost.sandboxes.registry import backend_class


@pytest.fixture(scope="module")
def made():
    (project,) = select(["inflection"])
    return make_project(project, seed=0, per_project=2, workers=2, cache=cache_dir())


def test_tasks_are_validated(made):
    tasks, report = made
    assert report.error is None and report.kept == len(tasks) == 2 and report.tests > 100
    for task in tasks:
        assert task.FAIL_TO_PASS and task.PASS_TO_PASS and task.source and task.split == "test"
        assert not set(task.FAIL_TO_PASS) & set(task.PASS_TO_PASS)
        assert task.FAIL_TO_PASS[0] in task.problem_statement


def test_same_seed_same_tasks(made):
    (project,) = select(["inflection"])
    again, _ = make_project(project, seed=0, per_project=2, workers=1, cache=cache_dir())
    assert [t.model_dump() for t in again] == [t.model_dump() for t in made[0]]


async def test_gold_patch_resolves_and_the_bug_fails(made):
    backend = backend_class("bubblewrap")(with_host_python(SandboxConfig(backend="bubblewrap", timeout_s=120)))
    reason = await backend.available()
    if reason is not None:
        pytest.skip(reason)
    task = made[0][0]
    verdict = await grade(backend, task, task.patch)
    assert verdict.resolved, verdict.log_tail
    # The buggy base commit, as the env prepares it from `source`: the FAIL_TO_PASS tests fail there.
    (project,) = select(["inflection"])
    run = run_tests(str(task_repo(task)), project, 120)
    assert set(task.FAIL_TO_PASS).isdisjoint(run.passed()) and set(task.PASS_TO_PASS) <= run.passed()
