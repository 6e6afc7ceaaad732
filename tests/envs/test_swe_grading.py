"""The SWE reward: a patch applied in a fresh sandbox, graded by swebench's own functions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import typer
from typer.testing import CliRunner

from roost.envs.swe.cli import register
from roost.envs.swe.fixtures import make_fixtures
from roost.envs.swe.grading import grade
from roost.envs.swe.task_sandbox import with_host_python
from roost.sandboxes import SandboxConfig
from roost.sandboxes.registry import backend_class


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    return {t.repo.split("/")[1]: t for t in make_fixtures(tmp_path_factory.mktemp("swe") / "fixtures")}


@pytest.fixture
async def backend():
    backend = backend_class("bubblewrap")(with_host_python(SandboxConfig(backend="bubblewrap", timeout_s=60)))
    reason = await backend.available()
    if reason is not None:
        pytest.skip(reason)
    return backend


def _clean(task) -> bool:
    status = subprocess.run(["git", "status", "--porcelain"], cwd=task.repo_dir, capture_output=True, text=True)
    return status.stdout == ""


async def test_reference_patches_resolve_every_fixture(backend, tasks):
    for task in tasks.values():
        verdict = await grade(backend, task, task.patch)
        assert verdict.resolved and verdict.reward == 1.0 and verdict.status == "RESOLVED_FULL", verdict.log_tail
        assert verdict.report["FAIL_TO_PASS"]["success"] == task.FAIL_TO_PASS
        assert sorted(verdict.report["PASS_TO_PASS"]["success"]) == sorted(task.PASS_TO_PASS)
        assert _clean(task), "grading changed the task's repository on the host"


async def test_wrong_patches_score_zero(backend, tasks):
    calc = tasks["calc"]
    wrong = calc.patch.replace("sum(values) / len(values)", "sum(values) / len(values) + 1")
    verdict = await grade(backend, calc, wrong)
    assert verdict.reward == 0.0 and verdict.status == "RESOLVED_NO" and verdict.patch_applied
    assert verdict.report["FAIL_TO_PASS"]["failure"] == calc.FAIL_TO_PASS
    breaks_others = calc.patch + (
        "diff --git a/calc/__init__.py b/calc/__init__.py\n--- a/calc/__init__.py\n"
        "+++ b/calc/__init__.py\n@@ -0,0 +1 @@\n+raise ImportError('broken')\n"
    )
    assert (await grade(backend, calc, breaks_others)).reward == 0.0


async def test_patches_that_do_not_apply(backend, tasks):
    calc = tasks["calc"]
    assert (await grade(backend, calc, "")).status == "empty_patch"
    assert (await grade(backend, calc, "this is not a patch\n")).status == "patch_failed"
    other = await grade(backend, calc, tasks["textkit"].patch)
    assert other.status == "patch_failed" and other.reward == 0.0
    assert _clean(calc)


async def test_tests_that_hang_are_bounded(backend, tasks):
    calc = tasks["calc"]
    hang = calc.patch.replace("return sum(values) / len(values)", "while True: pass")
    verdict = await grade(backend, calc, hang, timeout_s=3)
    assert verdict.reward == 0.0 and verdict.status == "tests_timeout"
    assert verdict.duration_s < 30


@pytest.mark.docker
@pytest.mark.skipif(
    os.environ.get("ROOST_REQUIRE_DOCKER") != "1" and not os.environ.get("DOCKER_HOST"),
    reason="no Docker engine configured (DOCKER_HOST)",
)
async def test_docker_sandbox_grades_the_same(tasks):
    from roost.envs.swe.docker_image import swe_sandbox_image

    image = await swe_sandbox_image()
    backend = backend_class("docker")(SandboxConfig(backend="docker", docker={"default_image": image}))
    assert await backend.available() is None
    calc = tasks["calc"]
    assert (await grade(backend, calc, calc.patch)).reward == 1.0
    assert (await grade(backend, calc, calc.patch.replace("/ len(values)", "/ len(values) + 1"))).reward == 0.0


def test_check_tasks_grades_gold_and_empty_patches(tasks, tmp_path):
    """`roost envs swe check-tasks`: a fixture's gold solves it and an empty patch does not; a
    task whose 'failing' tests already pass at base_commit shows as solved by the empty patch.
    (Two tasks, four gradings, to keep it cheap; every fixture's gold is checked above.)"""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    calc = tasks["calc"]
    trivial = calc.model_copy(update={"instance_id": "calc-trivial", "FAIL_TO_PASS": calc.PASS_TO_PASS[:1]})
    rows = [calc, trivial]
    source = tmp_path / "tasks.jsonl"
    source.write_text("".join(t.model_dump_json() + "\n" for t in rows))
    app, envs = typer.Typer(), typer.Typer()
    app.add_typer(envs, name="envs")
    register(envs)
    result = CliRunner().invoke(app, ["envs", "swe", "check-tasks", str(source), "--backend", "bubblewrap", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{") :])
    assert report["tasks"] == len(rows) and report["gold_solved"] == 1.0
    assert report["empty_resolved"] == ["calc-trivial"] and report["gold_failures"] == {}
    assert report["empty_solved"] == round(1 / len(rows), 4)
