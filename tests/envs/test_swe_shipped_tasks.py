"""The task set roost ships (`tasks=pypi`, made by `roost envs swe make-tasks`): what it holds,
as the env serves it, and its gold and empty patches graded on a task of each split."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from roost.envs.swe.env import SWEEnvConfig, load_swe_tasks, make_factory
from roost.envs.swe.task_check import check_task
from roost.envs.swe.task_making import shipped
from roost.envs.swe.task_making.projects import PROJECTS, TEST_PROJECTS
from roost.envs.swe.task_sandbox import with_host_python
from roost.sandboxes import SandboxConfig
from roost.sandboxes.registry import backend_class


@pytest.fixture(scope="module")
def env():
    return make_factory(tasks=shipped.NAME)()


async def test_the_set_holds_hundreds_of_tasks_over_every_project_in_two_splits(env):
    summary = json.loads(shipped.SUMMARY.read_text())
    assert set(env.info.splits) >= {"train", "test"}
    by_split = {split: await env.tasks(split) for split in ("train", "test")}
    kept = {p["project"]: p["kept"] for p in summary["projects"]}
    assert sum(len(tasks) for tasks in by_split.values()) == sum(kept.values()) >= 200
    tasks = {t.id: t for split in by_split.values() for t in split}
    projects = Counter(t.metadata["repo"].removeprefix("pypi/") for t in tasks.values())
    assert projects == Counter({name: n for name, n in kept.items() if n})
    assert set(projects) == {p.name for p in PROJECTS}  # every pinned project made tasks
    held_out = {t.metadata["repo"].removeprefix("pypi/") for t in by_split["test"]}
    assert held_out == set(TEST_PROJECTS)


async def test_a_task_of_each_split_is_solved_by_its_gold_patch_and_not_by_doing_nothing(env):
    backend = backend_class("bubblewrap")(with_host_python(SandboxConfig(backend="bubblewrap", timeout_s=300)))
    reason = await backend.available()
    if reason is not None:
        pytest.skip(reason)
    for split in ("train", "test"):
        first = (await env.tasks(split))[0].id
        task = next(t for t in load_swe_tasks(SWEEnvConfig(tasks=shipped.NAME)) if t.instance_id == first)
        check = await check_task(backend, task, timeout_s=300)
        assert check.gold_resolved and not check.empty_resolved, check
