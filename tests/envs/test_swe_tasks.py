"""SWE task files: SWE-bench, SWE-Gym and R2E-Gym rows, dataset folders, and bad rows."""

from __future__ import annotations

import json
import subprocess

import pytest

from roost.envs.swe.fixtures import fixture_tasks, make_fixtures
from roost.envs.swe.loaders import TaskFormatError, load_tasks, swebench_image, task_from_row

SWEBENCH_ROW = {
    "repo": "astropy/astropy",
    "instance_id": "astropy__astropy-12907",
    "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
    "patch": "diff --git a/x b/x\n",
    "test_patch": "diff --git a/astropy/tests/test_a.py b/astropy/tests/test_a.py\n",
    "problem_statement": "Modeling's separability_matrix is wrong for nested models",
    "hints_text": "",
    "created_at": "2022-03-03T15:14:54Z",
    "version": "4.3",
    "FAIL_TO_PASS": '["astropy/tests/test_a.py::test_x"]',
    "PASS_TO_PASS": '["astropy/tests/test_a.py::test_y"]',
    "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752",
}


def test_swebench_row():
    task = task_from_row(SWEBENCH_ROW)
    assert task.FAIL_TO_PASS == ["astropy/tests/test_a.py::test_x"]
    assert (
        task.image
        == swebench_image("astropy__astropy-12907")
        == "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"
    )
    assert task.parser_name == "parse_log_astropy"
    assert task.test_files() == ["astropy/tests/test_a.py"]
    assert "patch" not in task.agent_view() and "FAIL_TO_PASS" not in task.agent_view()


def test_swe_gym_row_with_its_own_image():
    row = {**SWEBENCH_ROW, "repo": "getmoto/moto", "docker_image": "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-7365"}
    task = task_from_row(row)
    assert task.image == row["docker_image"] and task.parser_name == "parse_log_pytest"


def test_r2e_gym_row():
    row = {
        "repo_name": "pandas",
        "docker_image": "namanjain12/pandas_final:abc123",
        "commit_hash": "abc123",
        "problem_statement": "fix it",
        "expected_output_json": json.dumps({"TestA.test_one": "PASSED", "TestA.test_two": "FAILED"}),
    }
    task = task_from_row(row)
    assert task.base_commit == "abc123" and task.FAIL_TO_PASS == ["TestA.test_one"]
    assert "run_tests.sh" in task.eval_script and task.image == row["docker_image"]


@pytest.mark.parametrize("missing", ["instance_id", "repo", "base_commit", "problem_statement", "FAIL_TO_PASS"])
def test_missing_fields_are_named(missing):
    row = {k: v for k, v in SWEBENCH_ROW.items() if k != missing}
    with pytest.raises(TaskFormatError, match=missing):
        task_from_row(row, "tasks.jsonl:3")


def test_bad_rows(tmp_path):
    with pytest.raises(TaskFormatError, match="FAIL_TO_PASS"):
        task_from_row({**SWEBENCH_ROW, "FAIL_TO_PASS": "[not json"})
    with pytest.raises(TaskFormatError, match="FAIL_TO_PASS"):
        task_from_row({**SWEBENCH_ROW, "FAIL_TO_PASS": "[]"})
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(SWEBENCH_ROW) + "\n{broken\n")
    with pytest.raises(TaskFormatError, match=r"tasks.jsonl:2 is not JSON"):
        load_tasks(path, "test")
    path.write_text(json.dumps(SWEBENCH_ROW) + "\n" + json.dumps(SWEBENCH_ROW) + "\n")
    with pytest.raises(TaskFormatError, match="appears twice"):
        load_tasks(path, "test")
    with pytest.raises(TaskFormatError, match="does not exist"):
        load_tasks(tmp_path / "nope.jsonl", "test")


def test_hugging_face_dataset_folder(tmp_path):
    import datasets

    rows = [SWEBENCH_ROW, {**SWEBENCH_ROW, "instance_id": "astropy__astropy-2"}]
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "saved"))
    assert [t.instance_id for t in load_tasks(tmp_path / "saved", "test")] == [r["instance_id"] for r in rows]
    (tmp_path / "pq").mkdir()
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "pq" / "test-00000-of-00001.parquet"))
    assert len(load_tasks(tmp_path / "pq", "test")) == 2
    with pytest.raises(TaskFormatError, match="train"):
        load_tasks(tmp_path / "pq", "train")


def test_fixtures_are_reproducible_git_repositories(tmp_path):
    first = make_fixtures(tmp_path / "a")
    second = fixture_tasks(tmp_path / "b")
    assert [t.base_commit for t in first] == [t.base_commit for t in second]
    assert len(first) >= 3
    for task in first:
        assert task.FAIL_TO_PASS and task.PASS_TO_PASS and task.patch and task.test_patch
        assert (tmp_path / "a" / "repos" / task.repo.split("/")[1] / ".git").is_dir()
    assert fixture_tasks(tmp_path / "a") == first


def test_swe_smith_row_sets_up_the_bug_and_reverses_it_as_gold(tmp_path):
    """A row in SWE-smith's published shape (no base_commit; `patch` introduces the bug): the
    setup script applies and commits the bug, and the task's gold patch undoes it, with real git."""
    repo = tmp_path / "repo"
    repo.mkdir()
    clean = "def mean(values):\n    return sum(values) / len(values)\n\n\ndef last(values):\n    return values[-1]\n"
    (repo / "stats.py").write_text(clean)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "clean"], cwd=repo, check=True)
    (repo / "stats.py").write_text(clean.replace("/ len(values)", "/ (len(values) + 1)").replace("[-1]", "[0]"))
    bug = subprocess.run(["git", "diff"], cwd=repo, capture_output=True, text=True, check=True).stdout
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=repo, check=True)
    row = {
        "instance_id": "owner__stats.a1b2c3d4.func_pm_op_swap__x1y2z3",
        "repo": "swesmith/owner__stats.a1b2c3d4",
        "patch": bug,
        "FAIL_TO_PASS": ["tests/test_stats.py::test_mean"],
        "PASS_TO_PASS": ["tests/test_stats.py::test_sum"],
        "image_name": "jyangballin/swesmith.x86_64.owner_1776_stats.a1b2c3d4",
        "problem_statement": "mean() is off",
        "created_at": "2025-03-14T00:00:00",
    }
    task = task_from_row(row)
    assert task.image == row["image_name"] and task.base_commit == row["instance_id"]
    assert task.FAIL_TO_PASS == row["FAIL_TO_PASS"] and task.patch != bug
    subprocess.run(["bash", "-e", "-c", task.setup_script], cwd=repo, check=True)
    assert "len(values) + 1" in (repo / "stats.py").read_text()
    assert subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout == ""
    subprocess.run(["git", "apply", "-"], cwd=repo, input=task.patch, text=True, check=True)
    assert (repo / "stats.py").read_text() == clean


async def test_rows_with_their_own_splits_are_served_in_them(tmp_path):
    """One env serves a file's train and test rows (the shipped set's), rows without a split in
    the env's `split`; a split's tasks are drawn and listed apart."""
    from roost.envs.errors import UnknownTaskError
    from roost.envs.swe.env import make_factory

    rows = [
        {**SWEBENCH_ROW, "instance_id": "a__a-1", "split": "train"},
        {**SWEBENCH_ROW, "instance_id": "b__b-1", "split": "test"},
        {**SWEBENCH_ROW, "instance_id": "c__c-1"},
    ]
    source = tmp_path / "tasks.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    env = make_factory(tasks=str(source), split="dev")()
    assert env.info.splits == ("dev", "test", "train")
    assert [t.id for t in await env.tasks("train")] == ["a__a-1"]
    assert [t.id for t in await env.tasks("dev")] == ["c__c-1"]
    assert env._choose(None, 0, "test").instance_id == "b__b-1"
    assert env._choose(None, 0, None).instance_id == "c__c-1"  # no split asked: the env's own
    with pytest.raises(UnknownTaskError, match="no task 'a__a-1' in split 'test'"):
        env._choose("a__a-1", None, "test")
    with pytest.raises(UnknownTaskError, match="serves the splits"):
        env._choose(None, 0, "valid")
