"""SWE task files: SWE-bench, SWE-Gym and R2E-Gym rows, dataset folders, and bad rows."""

from __future__ import annotations

import json

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
