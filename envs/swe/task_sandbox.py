"""A fresh sandbox holding one task's repository at its base commit, set up and ready."""

from __future__ import annotations

import asyncio
import shlex
import sys
import uuid
from pathlib import Path

from roost.sandboxes import Sandbox, SandboxBackend, SandboxConfig, SandboxSpec
from roost.sandboxes.errors import SandboxError

from .task import SWETask

SETUP_TIMEOUT_S = 1800.0


def with_host_python(config: SandboxConfig) -> SandboxConfig:
    """`config` with this process's Python (and its pytest) visible inside bubblewrap sandboxes.

    The fixture tasks run their tests with whatever `python` comes first on PATH; for the
    host-process backends that is the interpreter roost runs on, read-only.
    """
    prefixes = sorted({sys.prefix, sys.base_prefix})
    options = config.bubblewrap.model_copy(
        update={
            "ro_binds": [*config.bubblewrap.ro_binds, *prefixes],
            "path_prepend": [*config.bubblewrap.path_prepend, str(Path(sys.prefix) / "bin")],
        }
    )
    return config.model_copy(update={"bubblewrap": options})


def task_spec(task: SWETask, backend_name: str) -> SandboxSpec:
    directory = Path(task.repo_dir) if task.repo_dir else None
    if backend_name != "docker" and directory is None:
        raise SandboxError(
            f"task {task.instance_id} has only an image ({task.image}); the {backend_name} "
            "backend needs a `repo_dir`. Use the docker backend for image-based tasks."
        )
    if backend_name != "docker" and directory is not None and not directory.is_dir():
        raise SandboxError(
            f"repo_dir {directory} of task {task.instance_id} does not exist; "
            "run `roost envs swe make-fixtures` (fixtures) or fix the path"
        )
    image = task.image if backend_name == "docker" else None
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PAGER": "cat", "GIT_PAGER": "cat"}
    return SandboxSpec(image=image, directory=directory, workdir=task.workdir, env=env)


async def start_task_sandbox(backend: SandboxBackend, task: SWETask) -> Sandbox:
    """A sandbox of `task` with its setup script run; raises SandboxError if setup fails.

    A task with a `source` and no `repo_dir` gets its repository made from its sdist first
    (under $ROOST_HOME, once).
    """
    if task.repo_dir is None and task.source is not None:
        task = await prepared(task)
    sandbox = await backend.start(task_spec(task, backend.name))
    try:
        if task.setup_script.strip():
            result = await sandbox.exec(task.setup_script, timeout_s=SETUP_TIMEOUT_S)
            if not result.ok:
                raise SandboxError(
                    f"setup_script of task {task.instance_id} failed ({result.outcome.value}, exit "
                    f"{result.exit_code}): {result.output[-1000:]}"
                )
            await sandbox.record_start()  # setup's own changes are not the agent's
    except BaseException:
        await sandbox.close()
        raise
    return sandbox


async def prepared(task: SWETask) -> SWETask:
    """`task` with `repo_dir` set to its repository, made from its `source` sdist if need be."""
    from .task_making.sdist import SdistError, task_repo

    try:
        repo = await asyncio.to_thread(task_repo, task)
    except (SdistError, RuntimeError) as exc:
        raise SandboxError(f"could not prepare the repository of {task.instance_id}: {exc}") from exc
    return task.model_copy(update={"repo_dir": str(repo)})


async def tree_archive(sandbox: Sandbox) -> bytes:
    """The sandbox's working tree as a gzip'd tar (`.git` included), packed inside the sandbox."""
    archive = f"/tmp/roost-workspace-{uuid.uuid4().hex}.tgz"
    packed = await sandbox.exec(f"tar -czf {archive} -C {shlex.quote(sandbox.workdir)} .", timeout_s=600)
    if not packed.ok:
        raise SandboxError(f"tar exited {packed.exit_code}: {packed.output[-500:]}")
    try:
        return await sandbox.read_file(archive)
    finally:
        await sandbox.exec(f"rm -f {archive}", timeout_s=60)
