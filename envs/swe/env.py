"""The SWE env behind roost's Env protocol: one sandbox per episode, graded by swebench.

reset   a fresh sandbox with the task's repository at its base commit; the observation is
        the problem statement and how to act
step    a bash command or a file tool runs in that sandbox; `submit` (or mini-swe-agent's
        COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT) grades the patch in another fresh sandbox and
        terminates with reward 1.0 (resolved) or 0.0
close   frees the sandbox

`workspace()` hands out the sandbox's working tree (a gzip'd tar, `.git` included), and `submit`
takes an optional `patch` to grade instead of the sandbox's diff: a harness that edits a host
copy (`roost run --workspace`) submits that copy's diff.

A sandbox that cannot start or a grading run that breaks is an environment fault
(EnvFaultError → the runner's `infra_error`), never a reward of 0.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from roost.envs.errors import BadRequestError, EnvFaultError, EpisodeFinishedError, UnknownTaskError
from roost.envs.protocol import Action, EnvInfo, Observation, Reset, Step, Task
from roost.sandboxes import Sandbox, SandboxBackend, SandboxConfig, SandboxError, make_backend

from .grading import Verdict, grade
from .task import SWETask
from .task_sandbox import start_task_sandbox, tree_archive, with_host_python
from .tools import TOOLS, Command, clip, looks_like_patch, parse_action, submitted_text

INSTRUCTIONS = """Fix the issue below in the repository at {workdir} (your working directory).
Change source files, not tests. Run bash commands with the `bash` tool (each runs in a new shell), or use
read_file / write_file / str_replace. When done, call `submit` (or run
`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`): your changes are graded by the repository's tests.

<issue>
{problem}
</issue>"""


class SWEEnvConfig(BaseModel):
    """Keyword arguments of `make_factory` (and `--env-arg` of `roost serve swe`)."""

    model_config = ConfigDict(extra="forbid")

    tasks: str | None = None
    """A JSONL file or a dataset folder of SWE tasks; `pypi`: the set roost made from real projects
    and ships (`task_making/shipped.py`); None: roost's offline fixtures."""
    fixtures_dir: str | None = None
    """Where the fixtures live (built on first use); None: $ROOST_HOME/swe-fixtures."""
    split: str = "test"
    """The split of tasks that name none (SWE-bench rows, the fixtures); rows with a `split` of
    their own (the shipped set's train and test) are served in theirs."""
    sandbox: SandboxConfig = SandboxConfig()
    max_steps: int = Field(50, gt=0)
    """Actions per episode; past it the episode is truncated (and graded if grade_on_truncation)."""
    grade_on_truncation: bool = True
    """Grade the repository's state when the step limit cuts an episode short."""
    command_timeout_s: float = Field(60.0, gt=0)
    output_limit_bytes: int = Field(1 << 20, gt=0)
    """Output cap of one command; past it the command is killed."""
    observation_chars: int = Field(10_000, gt=100)
    """Longest observation; longer output keeps its head and tail."""
    eval_timeout_s: float = Field(1800.0, gt=0)
    host_python: bool = True
    """Make roost's own Python (with pytest) visible inside bubblewrap sandboxes."""


@dataclass
class SWETasks:
    """What all envs of one factory share: the config, the tasks, and the sandbox backend."""

    config: SWEEnvConfig
    tasks: dict[str, SWETask]
    """By instance id, each with its split."""
    backend: SandboxBackend | None = None

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(sorted({t.split for t in self.tasks.values() if t.split} | {self.config.split}))

    async def sandbox_backend(self) -> SandboxBackend:
        if self.backend is None:
            config = self.config.sandbox
            config = with_host_python(config) if self.config.host_python else config
            backend = await make_backend(config)
            reason = await backend.available()
            if reason is not None:
                raise EnvFaultError(f"the {backend.name} sandbox backend cannot run here: {reason}")
            if backend.name == "docker" and not config.docker.default_image:
                from .docker_image import swe_sandbox_image

                # Folder-based tasks (the fixtures) need git and pytest in the container.
                docker = config.docker.model_copy(update={"default_image": await swe_sandbox_image()})
                backend = type(backend)(config.model_copy(update={"docker": docker, "backend": "docker"}))
            self.backend = backend
        return self.backend


def load_swe_tasks(config: SWEEnvConfig) -> list[SWETask]:
    if config.tasks is None:
        from .fixtures import fixture_tasks

        return fixture_tasks(Path(config.fixtures_dir) if config.fixtures_dir else None)
    from .loaders import load_tasks

    return load_tasks(task_source(config.tasks), config.split, every_split=True)


def task_source(tasks: str) -> Path:
    """Where `tasks=` points: the shipped set for its name (`pypi`), else the path given."""
    from .task_making import shipped

    return shipped.TASKS if tasks == shipped.NAME else Path(tasks).expanduser()


def make_factory(**kwargs: Any):
    config = SWEEnvConfig(**kwargs)
    tasks = [t if t.split else t.model_copy(update={"split": config.split}) for t in load_swe_tasks(config)]
    shared = SWETasks(config, {t.instance_id: t for t in tasks})
    return lambda: SWEEnv(shared)


@dataclass
class _Episode:
    task: SWETask
    sandbox: Sandbox
    steps: int = 0
    done: bool = False
    verdict: Verdict | None = None
    log: list[str] = field(default_factory=list)


class SWEEnv:
    info_keys = frozenset(
        {
            "instance_id",
            "repo",
            "workdir",
            "backend",
            "limits_enforced",
            "task",  # reset
            "output",
            "returncode",
            "outcome",
            "exit_reason",  # a tool's run
            "resolved",
            "status",
            "patch_applied",
            "tests",
            "eval_log_tail",
            "eval_s",
            "patch",
            "patch_source",  # grading
        }
    )

    def __init__(self, shared: SWETasks) -> None:
        self._shared = shared
        self._episode: _Episode | None = None

    @property
    def info(self) -> EnvInfo:
        from importlib.metadata import version

        return EnvInfo(
            "swe",
            f"roost-swe-1+swebench-{version('swebench')}",
            TOOLS,
            self._shared.splits,
            "Repository tasks in SWE-bench's format: bash and file tools in a sandbox, graded by swebench.",
        )

    async def tasks(self, split: str) -> list[Task]:
        return [
            Task(t.instance_id, split, {"repo": t.repo, "base_commit": t.base_commit})
            for t in self._shared.tasks.values()
            if t.split == split
        ]

    async def reset(
        self,
        *,
        task_id: str | None = None,
        seed: int | None = None,
        split: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> Reset:
        if options:
            raise BadRequestError(f"unknown reset option(s) {sorted(options)}; the SWE env takes none")
        task = self._choose(task_id, seed, split)
        await self.close()
        backend = await self._shared.sandbox_backend()
        try:
            sandbox = await start_task_sandbox(backend, task)
        except SandboxError as exc:
            raise EnvFaultError(f"could not start a sandbox for {task.instance_id}: {exc}") from exc
        self._episode = _Episode(task, sandbox)
        text = INSTRUCTIONS.format(workdir=sandbox.workdir, problem=task.problem_statement)
        info = {
            "instance_id": task.instance_id,
            "repo": task.repo,
            "workdir": sandbox.workdir,
            "backend": backend.name,
            "limits_enforced": getattr(sandbox, "limits_enforced", False),
            "task": task.agent_view(),
        }
        return Reset(task.instance_id, Observation(text), TOOLS, info)

    async def step(self, action: Action) -> Step:
        episode = self._episode
        if episode is None:
            raise EpisodeFinishedError("no episode is running; call reset first")
        if episode.done:
            raise EpisodeFinishedError("this episode has ended; call reset to start another")
        command = parse_action(action)
        episode.steps += 1
        try:
            return await self._run(episode, command)
        except SandboxError as exc:
            episode.done = True
            raise EnvFaultError(f"the sandbox of {episode.task.instance_id} failed: {exc}") from exc

    async def workspace(self) -> bytes:
        episode = self._episode
        if episode is None or episode.done:
            raise EpisodeFinishedError("no episode is running; call reset first")
        try:
            return await tree_archive(episode.sandbox)
        except SandboxError as exc:
            raise EnvFaultError(f"the sandbox of {episode.task.instance_id} failed to pack its tree: {exc}") from exc

    async def close(self) -> None:
        episode, self._episode = self._episode, None
        if episode is not None:
            await episode.sandbox.close()

    def _choose(self, task_id: str | None, seed: int | None, split: str | None) -> SWETask:
        shared = self._shared
        if split is not None and split not in shared.splits:
            raise UnknownTaskError(f"split {split!r}: this SWE env serves the splits {list(shared.splits)}")
        split = split or shared.config.split
        tasks = {task_id: t for task_id, t in shared.tasks.items() if t.split == split}
        if task_id is not None:
            if task_id not in tasks:
                raise UnknownTaskError(
                    f"no task {task_id!r} in split {split!r}; list them with GET /tasks?split={split}"
                )
            return tasks[task_id]
        if not tasks:
            raise BadRequestError(f"this SWE env has no tasks in split {split!r}")
        return random.Random(seed).choice(sorted(tasks.values(), key=lambda t: t.instance_id))

    async def _run(self, episode: _Episode, command: Command) -> Step:
        if command.tool == "submit":
            return await self._finish(episode, command.args.get("patch") or None, "submitted", "", given=True)
        text, info = await self._tool(episode.sandbox, command)
        if command.tool == "bash":
            submission = submitted_text(info["output"], info["returncode"])
            if submission is not None:
                return await self._finish(episode, submission, "submitted", text)
        config = self._shared.config
        if episode.steps >= config.max_steps:
            if config.grade_on_truncation:
                return await self._finish(episode, None, "step_limit", text, truncated=True)
            episode.done = True
            await episode.sandbox.close()
            return Step(
                Observation(clip(text, config.observation_chars)),
                0.0,
                False,
                True,
                {**_public(info, config.observation_chars), "exit_reason": "step_limit"},
            )
        return Step(
            Observation(clip(text, config.observation_chars)),
            0.0,
            False,
            False,
            _public(info, config.observation_chars),
        )

    async def _tool(self, sandbox: Sandbox, command: Command) -> tuple[str, dict[str, Any]]:
        config, args = self._shared.config, command.args
        if command.tool == "bash":
            result = await sandbox.exec(
                args["command"], timeout_s=config.command_timeout_s, output_limit=config.output_limit_bytes
            )
            note = {
                "timeout": f"\n[killed: the command ran past {config.command_timeout_s:.0f}s]",
                "output_limit": f"\n[killed: the command printed more than {config.output_limit_bytes} bytes]",
                "oom_killed": "\n[killed: out of memory]",
            }.get(result.outcome.value, "")
            code = "" if result.exit_code is None else str(result.exit_code)
            text = f"<returncode>{code}</returncode>\n<output>\n{result.output}{note}</output>"
            return text, {"output": result.output, "returncode": result.exit_code, "outcome": result.outcome.value}
        if command.tool == "read_file":
            return await _read(sandbox, args), {"output": "", "returncode": 0, "outcome": "exited"}
        if command.tool == "write_file":
            await sandbox.write_file(args["path"], args["content"])
            return f"wrote {len(args['content'])} characters to {args['path']}", {"output": "", "returncode": 0}
        return await _replace(sandbox, args), {"output": "", "returncode": 0}

    async def _finish(
        self,
        episode: _Episode,
        submission: str | None,
        reason: str,
        text: str,
        truncated: bool = False,
        given: bool = False,
    ) -> Step:
        """Grade `submission` (a patch given to `submit`, or a submitting command's output when it
        looks like one), else the sandbox's diff."""
        episode.done = True
        source = "submission" if submission and (given or looks_like_patch(submission)) else "sandbox_diff"
        patch = submission if source == "submission" else await episode.sandbox.diff()
        await episode.sandbox.close()  # the episode is over: free it before grading starts another
        backend = await self._shared.sandbox_backend()
        try:
            verdict = await grade(backend, episode.task, patch, timeout_s=self._shared.config.eval_timeout_s)
        except SandboxError as exc:
            raise EnvFaultError(f"grading {episode.task.instance_id} failed in the sandbox: {exc}") from exc
        episode.verdict = verdict
        summary = f"{text}\n\n" if text else ""
        summary += f"Graded: {verdict.status} (reward {verdict.reward:.0f})."
        info = {**verdict.info(), "exit_reason": reason, "patch": patch, "patch_source": source}
        return Step(Observation(summary), verdict.reward, not truncated, truncated, info)


async def _read(sandbox: Sandbox, args: dict[str, Any]) -> str:
    try:
        data = await sandbox.read_file(args["path"])
    except FileNotFoundError:
        return f"error: {args['path']} is not a file"
    lines = data.decode("utf-8", errors="replace").splitlines()
    start = max(args.get("start_line", 1), 1)
    end = min(args.get("end_line", len(lines)), len(lines))
    return "\n".join(f"{n:6d}\t{lines[n - 1]}" for n in range(start, end + 1))


async def _replace(sandbox: Sandbox, args: dict[str, Any]) -> str:
    try:
        text = (await sandbox.read_file(args["path"])).decode("utf-8")
    except FileNotFoundError:
        return f"error: {args['path']} is not a file"
    except UnicodeDecodeError:
        return f"error: {args['path']} is not UTF-8 text"
    count = text.count(args["old"])
    if count != 1:
        return f"error: `old` occurs {count} times in {args['path']}; it must occur exactly once"
    await sandbox.write_file(args["path"], text.replace(args["old"], args["new"]))
    return f"replaced 1 occurrence in {args['path']}"


def _public(info: dict[str, Any], limit: int) -> dict[str, Any]:
    """The step's info; the raw output clipped like the observation (harnesses format their own)."""
    return {**info, "output": clip(info.get("output", ""), limit)}
