"""Tasks from files: SWE-bench / SWE-Gym / R2E-Gym / SWE-smith JSONL, or a Hugging Face dataset folder.

A row's format is recognised by its fields. Fields roost does not use (created_at,
FAIL_TO_FAIL, ...) are dropped; a row missing a required field raises TaskFormatError
naming the file, the row and the field.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .patches import reverse_patch
from .task import SWETask

# R2E-Gym names tests 'Class.test' (pytest ids without the file); its rows ship the tests in
# /r2e_tests and a runner at /root/run_tests.sh. The sed turns pytest's '-rA' summary lines
# into those names so swebench's own pytest parser reads them.
R2E_EVAL = (
    "cp -r /r2e_tests r2e_tests 2>/dev/null; bash /root/run_tests.sh 2>&1 | sed -E "
    "'/^(PASSED|FAILED|ERROR|SKIPPED|XFAIL) /{s/ [^ ]*\\.py::/ /;s/::/./g;s/ - .*//}'"
)


class TaskFormatError(ValueError):
    """A task row that is not a usable SWE task."""


def swebench_image(instance_id: str) -> str:
    """SWE-bench's published evaluation image name for an instance."""
    return f"swebench/sweb.eval.x86_64.{instance_id.replace('__', '_1776_').lower()}:latest"


def task_from_row(row: dict[str, Any], where: str = "row") -> SWETask:
    if not isinstance(row, dict):
        raise TaskFormatError(f"{where}: expected a JSON object, got {type(row).__name__}")
    fields = _r2e_fields(row) if _is_r2e(row) else _swe_smith_fields(row) if _is_swe_smith(row) else dict(row)
    if "docker_image" in fields and "image" not in fields:
        fields["image"] = fields["docker_image"]
    if "image_name" in fields and "image" not in fields:
        fields["image"] = fields["image_name"]
    known = {k: v for k, v in fields.items() if k in SWETask.model_fields and v is not None}
    if not any(known.get(k) for k in ("image", "repo_dir", "source")) and known.get("instance_id"):
        known["image"] = swebench_image(str(known["instance_id"]))
    try:
        return SWETask.model_validate(known)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'task'}: {e['msg']}" for e in exc.errors())
        raise TaskFormatError(
            f"{where} is not a SWE task ({problems}). Required: instance_id, repo, base_commit, "
            "problem_statement, FAIL_TO_PASS (SWE-bench's instance format)."
        ) from None


def load_jsonl(path: Path) -> list[SWETask]:
    """Every row of a `.jsonl` (or gzipped `.jsonl.gz`) file."""
    tasks = []
    with gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskFormatError(f"{path}:{number} is not JSON ({exc.msg})") from None
            tasks.append(task_from_row(row, f"{path}:{number}"))
    return _unique(tasks, path)


def load_hf_folder(path: Path, split: str) -> list[SWETask]:
    """A dataset saved with `save_to_disk`, or a folder of `<split>.parquet` / `<split>.jsonl`."""
    for candidate in (path / f"{split}.jsonl", path / "data" / f"{split}.jsonl"):
        if candidate.is_file():
            return load_jsonl(candidate)
    rows = _hf_rows(path, split)
    return _unique([task_from_row(row, f"{path} [{split}] row {i}") for i, row in enumerate(rows)], path)


def load_tasks(source: Path, split: str, every_split: bool = False) -> list[SWETask]:
    """The tasks of `split`: a file's rows whose `split` is that one or unset (`every_split`: a
    file's every row), or a dataset's split."""
    if source.is_file():
        return [task for task in load_jsonl(source) if every_split or task.split in (None, split)]
    if source.is_dir():
        return load_hf_folder(source, split)
    raise TaskFormatError(
        f"task source {source} does not exist; give a .jsonl file or a dataset folder, "
        "or run `roost envs swe make-fixtures`"
    )


def _hf_rows(path: Path, split: str) -> Iterable[dict]:
    import datasets

    parquet = sorted(path.glob(f"**/{split}*.parquet"))
    if parquet:
        return datasets.load_dataset("parquet", data_files=[str(p) for p in parquet], split="train")
    if (path / "dataset_dict.json").is_file() or (path / split / "dataset_info.json").is_file():
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise TaskFormatError(f"{path} has splits {sorted(loaded)}, not {split!r}")
            return loaded[split]
        return loaded
    if (path / "dataset_info.json").is_file():
        return datasets.load_from_disk(str(path))
    raise TaskFormatError(f"{path} holds no {split}.jsonl, {split}*.parquet or saved dataset")


def _is_r2e(row: dict) -> bool:
    return "expected_output_json" in row and "base_commit" not in row


def _r2e_fields(row: dict) -> dict:
    expected = row.get("expected_output_json") or "{}"
    try:
        statuses = json.loads(expected) if isinstance(expected, str) else dict(expected)
    except json.JSONDecodeError:
        statuses = {}
    image = row.get("docker_image") or row.get("image_name")
    return {
        "instance_id": row.get("instance_id") or (image or "").rsplit("/", 1)[-1].replace(":", "-"),
        "repo": row.get("repo_name") or row.get("repo"),
        "base_commit": row.get("commit_hash") or row.get("base_commit"),
        "problem_statement": row.get("problem_statement"),
        "FAIL_TO_PASS": sorted(name for name, status in statuses.items() if status == "PASSED"),
        "image": image,
        "eval_script": f"cd /testbed\n: '>>>>> Start Test Output'\n{R2E_EVAL}\n: '>>>>> End Test Output'",
        "log_parser": "parse_log_pytest",
    }


def _is_swe_smith(row: dict) -> bool:
    # SWE-smith rows: instance_id, repo ('swesmith/owner__name.commit'), patch, FAIL_TO_PASS,
    # PASS_TO_PASS, image_name, problem_statement; no base_commit.
    return "image_name" in row and "base_commit" not in row and "patch" in row


def _swe_smith_fields(row: dict) -> dict:
    """SWE-smith's `patch` introduces the bug into the image's clean repository: the setup
    script applies and commits it (offline, where SWE-smith's harness checks out the instance's
    branch from its GitHub mirror), and the gold fix is its inverse."""
    bug = row.get("patch") or ""
    marker = "ROOST_SWE_SMITH_BUG"
    setup = (
        f"git apply <<'{marker}'\n{bug if bug.endswith(chr(10)) else bug + chr(10)}{marker}\n"
        "git -c user.name=roost -c user.email=roost@localhost commit -qam 'SWE-smith bug'"
    )
    return {
        **{k: v for k, v in row.items() if k != "patch"},
        "base_commit": row.get("instance_id"),  # SWE-smith's branch of the bug
        "image": row.get("image_name"),
        "patch": reverse_patch(bug) if bug.strip() else "",
        "setup_script": setup if bug.strip() else "",
    }


def _unique(tasks: list[SWETask], source: Path) -> list[SWETask]:
    seen: set[str] = set()
    for task in tasks:
        if task.instance_id in seen:
            raise TaskFormatError(f"{source}: instance_id {task.instance_id!r} appears twice")
        seen.add(task.instance_id)
    return tasks
