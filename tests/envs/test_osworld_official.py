"""What the OSWorld env checks before any desktop starts: its task splits, its arguments, and
`provider=osworld` (OSWorld's own DesktopEnv), refused with what to do when its VM image is absent."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from roost.envs.errors import BadRequestError, UnknownTaskError
from roost.envs.osworld.env import make_factory
from roost.envs.osworld.official import OfficialOptions, check_official
from roost.envs.registry import resolve


def task(task_id: str) -> dict:
    return {"id": task_id, "instruction": f"do {task_id}", "config": [], "evaluator": {"func": "infeasible"}}


@pytest.fixture
def tasks_dir(tmp_path):
    root = tmp_path / "evaluation_examples"
    for domain, ids in {"os": ["a", "b"], "calc": ["c"]}.items():
        (root / "examples" / domain).mkdir(parents=True)
        for task_id in ids:
            (root / "examples" / domain / f"{task_id}.json").write_text(json.dumps(task(task_id)))
    (root / "train.json").write_text(json.dumps({"os": ["a", "b"]}))
    (root / "test.json").write_text(json.dumps({"calc": ["c"]}))
    return root


async def test_splits_come_from_index_files(tasks_dir):
    env = make_factory(tasks=str(tasks_dir))()
    assert set(env.info.splits) == {"all", "train", "test"}
    assert [t.id for t in await env.tasks("train")] == ["a", "b"]
    assert [(t.id, t.metadata["domain"], t.metadata["infeasible"]) for t in await env.tasks("test")] == [
        ("c", "calc", True)
    ]
    assert await env.tasks("nope") == []
    with pytest.raises(UnknownTaskError, match="no task 'c' in split 'train'"):
        await env.reset(task_id="c", split="train")
    with pytest.raises(UnknownTaskError, match="no split 'dev'"):
        await env.reset(split="dev")
    with pytest.raises(BadRequestError, match="unknown reset option"):
        await env.reset(task_id="a", options={"fast": True})


def test_a_single_file_is_split_test(tasks_dir):
    env = make_factory(tasks=str(tasks_dir / "examples" / "os" / "a.json"))()
    assert set(env.info.splits) == {"all", "test"}


def test_bad_arguments_are_named(tmp_path, tasks_dir):
    with pytest.raises(BadRequestError, match="no OSWorld tasks at .*make-fixtures"):
        make_factory(tasks=str(tmp_path / "missing"))
    with pytest.raises(ValidationError, match="observation_type"):
        make_factory(tasks=str(tasks_dir), observation_type="video")
    with pytest.raises(ValidationError, match="action_space"):
        make_factory(tasks=str(tasks_dir), action_space="claude")
    with pytest.raises(ValidationError, match="Extra inputs"):
        make_factory(tasks=str(tasks_dir), screen="big")


def test_official_provider_needs_its_vm_image(tasks_dir, tmp_path):
    with pytest.raises(
        BadRequestError, match=r'needs its VM image: pass official={"path_to_vm": PATH}, PATH being Ubuntu.qcow2'
    ):
        make_factory(tasks=str(tasks_dir), provider="osworld")
    missing = tmp_path / "Ubuntu.qcow2"
    with pytest.raises(BadRequestError, match=f"OSWorld's VM image {missing} does not exist"):
        make_factory(tasks=str(tasks_dir), provider="osworld", official={"path_to_vm": str(missing)})
    with pytest.raises(BadRequestError, match="vmx"):
        check_official(OfficialOptions(provider_name="vmware"))


def test_official_provider_says_when_desktop_env_does_not_import(tmp_path):
    image = tmp_path / "Ubuntu.qcow2"
    image.write_bytes(b"qcow")
    try:
        from desktop_env.desktop_env import DesktopEnv  # noqa: F401
    except ImportError:
        with pytest.raises(BadRequestError, match="DesktopEnv does not import here"):
            check_official(OfficialOptions(path_to_vm=str(image)))
    else:
        check_official(OfficialOptions(path_to_vm=str(image)))


def test_registered_and_on_the_cli(tasks_dir):
    assert resolve("osworld").entry_point == "roost.envs.osworld.env:make_factory"
    run = subprocess.run(
        [sys.executable, "-m", "roost.envs.osworld.cli", "check", str(tasks_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {
        "tasks": 3,
        "splits": {"all": 3, "test": 1, "train": 2},
        "domains": {"calc": 1, "os": 2},
        "skipped": [],
    }
    (tasks_dir / "examples" / "os" / "a.json").write_text('{"id": "a"}')
    run = subprocess.run(
        [sys.executable, "-m", "roost.envs.osworld.cli", "check", str(tasks_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1 and "a.json" in run.stderr and "instruction" in run.stderr
