"""The Hermes env behind roost's Env protocol: one sandbox and one hermes-agent per episode.

reset   a fresh sandbox holding the task's files (its setup run); the observation is the
        task's instruction and the one tool is `run_agent`
step    `run_agent`: the first call starts the episode's hermes-agent `AIAgent` with the model
        endpoint it names (the gateway session's base_url, so every call is recorded), its
        terminal and file tools running in the sandbox; each call returns when the agent is
        done or after `wait_s`. When it is done the task's verifier runs in the sandbox and
        decides the reward: terminated, or truncated when the agent ran out of iterations or
        its conversation outgrew the model's context window
close   interrupts the agent and frees the sandbox

A sandbox that cannot start, a verifier that cannot run, or hermes-agent crashing is an
environment fault (→ the runner's `infra_error`), never a reward of 0. A model endpoint that
stops answering ends the episode truncated with status `model_unavailable`, unscored; the
hermes harness reports it as the model's fault.
"""

from __future__ import annotations

import os
import random
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field

from roost.envs.errors import BadRequestError, EnvFaultError, EpisodeFinishedError, InvalidActionError, UnknownTaskError
from roost.envs.protocol import Action, EnvInfo, Observation, Reset, Step, Task
from roost.sandboxes import Sandbox, SandboxBackend, SandboxConfig, SandboxError, SandboxSpec, make_backend

from .conversation import AgentSettings, Conversation, Outcome
from .loop_thread import LoopThread
from .task import HermesTask, builtin_tasks_path, load_tasks
from .tools import TOOLS, RunAgent, parse_action
from .verifier import verify

DESCRIPTION = (
    "hermes-agent (Nous Research) per episode: terminal and file tools in a sandbox, model calls "
    "through the gateway; an instruction per task, rewarded by a verifier command."
)
# Each request must answer within the env worker's call timeout (120 s by default): a task's
# setup, and each wait on the agent, are kept well inside it.
SETUP_TIMEOUT_S = 90.0
MAX_WAIT_S = 60.0
SANDBOX_BACKEND_VAR = "ROOST_HERMES_SANDBOX"
# The conversation statuses where a limit, not the agent, ended the episode (truncated, still verified).
TRUNCATED = {"max_iterations": "ran out of iterations", "context_length": "outgrew the context window"}
# No bytecode caches: an edit within the second a module was first imported keeps its size and
# mtime, and a stale .pyc would then hide the fix from the verifier.
SANDBOX_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PAGER": "cat", "GIT_PAGER": "cat"}


class HermesEnvConfig(BaseModel):
    """Keyword arguments of `make_factory` (and `--env-arg` of `roost serve hermes`)."""

    model_config = ConfigDict(extra="forbid")

    tasks: str | None = None
    """A task file (JSON list or JSONL of HermesTask); None: roost's offline task set."""
    sandbox: SandboxConfig = SandboxConfig()
    workdir: str = "/workspace"
    """The agent's working directory in the sandbox (the local backend reports its own)."""
    max_iterations: int = Field(30, gt=0)
    """Model calls per episode at most (the harness may ask for fewer)."""
    toolsets: list[str] = ["terminal", "file"]
    """hermes-agent toolsets offered to the model; only terminal and file tools touch the sandbox."""
    max_tokens: int | None = Field(None, gt=0)
    """Completion tokens per model call; None: the endpoint's default."""
    temperature: float | None = None
    command_timeout_s: int = Field(60, gt=0)
    """Default time limit of one terminal command (the model may ask for less or more)."""
    wait_s: float = Field(20.0, ge=0, le=60)
    """Longest a `run_agent` call waits when it names no wait_s (at most 60 s a call)."""
    context_length: int = Field(65_536, gt=0)
    """The window hermes-agent is told (it refuses < 64K, which is then what it is told)."""
    hermes_config: dict[str, Any] = {}
    """Merged into hermes-agent's config.yaml (e.g. {"agent": {"api_max_retries": 1}})."""
    hermes_home: str | None = None
    """hermes-agent's home (config, logs, session database); None: a fresh temporary folder."""
    base_url_host: str | None = None
    """Replace the host of the model URL the harness sends, e.g. 'host.docker.internal' when this
    env runs in a container and the gateway on the host."""


@dataclass
class HermesShared:
    """What all envs of one factory share: config, tasks, the sandbox loop and backend."""

    config: HermesEnvConfig
    tasks: dict[str, HermesTask]
    loop: LoopThread | None = None
    backend: SandboxBackend | None = None

    def prepare(self) -> LoopThread:
        """hermes-agent's process setup and the sandbox loop, on first use (not at import)."""
        if self.loop is None:
            from .process import default_config, merge, prepare_process

            config = merge(default_config(self.config.context_length), self.config.hermes_config)
            try:
                prepare_process(config, Path(self.config.hermes_home) if self.config.hermes_home else None)
            except ImportError as exc:
                raise EnvFaultError(
                    f"hermes-agent is not installed here ({exc}); install it with "
                    "`pip install --no-deps hermes-agent==0.19.0` plus roost's `agents` "
                    "extra, or serve the env in its container (`roost serve hermes --docker`)"
                ) from exc
            self.loop = LoopThread()
        return self.loop

    async def start_sandbox(self, task: HermesTask) -> Sandbox:
        """A sandbox holding the task's files, its setup run (on the sandbox loop)."""
        if self.backend is None:
            self.backend = await make_backend(self.config.sandbox)
            reason = await self.backend.available()
            if reason is not None:
                self.backend = None
                raise SandboxError(f"the {self.config.sandbox.backend} sandbox backend cannot run here: {reason}")
        sandbox = await self.backend.start(SandboxSpec(workdir=self.config.workdir, env=SANDBOX_ENV))
        try:
            for path, text in task.files.items():
                await sandbox.write_file(path, text)
            if task.setup.strip():
                result = await sandbox.exec(task.setup, timeout_s=SETUP_TIMEOUT_S)
                if not result.ok:
                    raise SandboxError(
                        f"setup of task {task.id} failed ({result.outcome.value}, exit "
                        f"{result.exit_code}): {result.output[-1000:]}"
                    )
            await sandbox.record_start()
        except BaseException:
            await sandbox.close()
            raise
        return sandbox


def load_hermes_tasks(config: HermesEnvConfig) -> list[HermesTask]:
    return load_tasks(Path(config.tasks).expanduser() if config.tasks else builtin_tasks_path())


def make_factory(**kwargs: Any):
    if "sandbox" not in kwargs and os.environ.get(SANDBOX_BACKEND_VAR):
        # The env's image sets it to `local`: there the container is the isolation boundary.
        kwargs["sandbox"] = {"backend": os.environ[SANDBOX_BACKEND_VAR]}
    config = HermesEnvConfig(**kwargs)
    shared = HermesShared(config, {t.id: t for t in load_hermes_tasks(config)})
    return lambda: HermesEnv(shared)


@dataclass
class _Episode:
    task: HermesTask
    sandbox: Sandbox
    key: str
    """hermes-agent's task id for this episode (its tools find the sandbox by it)."""
    conversation: Conversation | None = None
    done: bool = False
    seen_tools: int = 0


class HermesEnv:
    info_keys = frozenset(
        {
            "task_id",
            "workdir",
            "backend",
            "instruction",  # reset
            "status",
            "api_calls",
            "new_tool_calls",  # while hermes-agent runs
            "exit_reason",
            "final_response",
            "error",
            "endpoint_error",
            "tool_calls",
            "verdict",  # once it stops
        }
    )

    def __init__(self, shared: HermesShared) -> None:
        self._shared = shared
        self._episode: _Episode | None = None

    @property
    def info(self) -> EnvInfo:
        splits = tuple(sorted({t.split for t in self._shared.tasks.values()}))
        return EnvInfo("hermes", f"roost-hermes-1+hermes-agent-{_hermes_version()}", TOOLS, splits, DESCRIPTION)

    async def tasks(self, split: str) -> list[Task]:
        return [
            Task(t.id, split, {"instruction": t.instruction, **t.metadata})
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
            raise BadRequestError(f"unknown reset option(s) {sorted(options)}; the Hermes env takes none")
        task = self._choose(task_id, seed, split)
        await self.close()
        loop = self._shared.prepare()
        try:
            sandbox = await loop.run(self._shared.start_sandbox(task))
        except SandboxError as exc:
            raise EnvFaultError(f"could not start a sandbox for task {task.id}: {exc}") from exc
        self._episode = _Episode(task, sandbox, f"roost-{uuid.uuid4().hex[:12]}")
        info = {
            "task_id": task.id,
            "workdir": sandbox.workdir,
            "backend": sandbox.backend,
            "instruction": task.instruction,
        }
        return Reset(task.id, Observation(task.instruction), TOOLS, info)

    async def step(self, action: Action) -> Step:
        episode = self._episode
        if episode is None:
            raise EpisodeFinishedError("no episode is running; call reset first")
        if episode.done:
            raise EpisodeFinishedError("this episode has ended; call reset to start another")
        args = parse_action(action)
        if episode.conversation is None:
            self._start(episode, args)
        conversation = episode.conversation
        wait = self._shared.config.wait_s if args.wait_s is None else args.wait_s
        outcome = await conversation.wait(min(wait, MAX_WAIT_S))
        if outcome is None:
            return self._progress(episode, conversation)
        return await self._finish(episode, outcome)

    async def close(self) -> None:
        episode, self._episode = self._episode, None
        if episode is None:
            return
        if episode.conversation is not None:
            episode.conversation.interrupt()
        await self._free(episode)

    def _choose(self, task_id: str | None, seed: int | None, split: str | None) -> HermesTask:
        tasks = self._shared.tasks
        if task_id is not None:
            task = tasks.get(task_id)
            if task is None or (split is not None and task.split != split):
                raise UnknownTaskError(
                    f"no task {task_id!r}"
                    + (f" in split {split!r}" if split else "")
                    + "; list them with GET /tasks?split=..."
                )
            return task
        pool = sorted((t for t in tasks.values() if split is None or t.split == split), key=lambda t: t.id)
        if not pool:
            splits = sorted({t.split for t in tasks.values()})
            raise UnknownTaskError(f"no tasks in split {split!r}; this env has the splits {splits}")
        return random.Random(seed).choice(pool)

    def _start(self, episode: _Episode, args: RunAgent) -> None:
        from .backend import SandboxTerminal, attach

        if not args.base_url or not args.model:
            raise InvalidActionError(
                "the first run_agent call starts the agent: it needs `base_url` (an "
                "OpenAI-compatible endpoint, e.g. a gateway session URL) and `model`"
            )
        config, loop = self._shared.config, self._shared.prepare()
        iterations = min(args.max_iterations or config.max_iterations, config.max_iterations)
        settings = AgentSettings(
            base_url=self._model_url(args.base_url),
            api_key=args.api_key or "EMPTY",
            model=args.model,
            max_iterations=iterations,
            toolsets=tuple(config.toolsets),
            max_tokens=config.max_tokens,
            temperature=config.temperature,
        )
        terminal = SandboxTerminal(episode.sandbox, loop.loop, timeout=config.command_timeout_s)
        attach(episode.key, terminal)
        episode.conversation = Conversation(settings, episode.task.instruction, episode.key, terminal)
        episode.conversation.start()

    def _progress(self, episode: _Episode, conversation: Conversation) -> Step:
        new = conversation.tool_calls[episode.seen_tools :]
        episode.seen_tools += len(new)
        text = (
            f"hermes-agent is working: {conversation.api_calls} model calls so far"
            + (f"; it ran {', '.join(new)}" if new else "")
            + ". Call run_agent again to keep waiting."
        )
        return Step(
            Observation(text),
            0.0,
            False,
            False,
            {"status": "running", "api_calls": conversation.api_calls, "new_tool_calls": new},
        )

    async def _finish(self, episode: _Episode, outcome: Outcome) -> Step:
        episode.done = True
        status, result = outcome.status, outcome.result
        task = episode.task
        if status == "crashed":
            await self._free(episode)
            error = outcome.error
            raise EnvFaultError(f"hermes-agent failed on task {task.id}: {type(error).__name__}: {error}")
        info: dict[str, Any] = {
            "status": status,
            "api_calls": int(result.get("api_calls") or 0),
            "exit_reason": str(result.get("turn_exit_reason") or ""),
            "final_response": str(result.get("final_response") or ""),
            "error": result.get("error"),
            "endpoint_error": outcome.endpoint_error,
            "tool_calls": list(episode.conversation.tool_calls) if episode.conversation else [],
        }
        if status == "model_unavailable":
            await self._free(episode)
            return Step(Observation(f"the model endpoint stopped answering: {info['error']}"), 0.0, False, True, info)
        try:
            verdict = await self._shared.prepare().run(verify(episode.sandbox, task))
        finally:
            await self._free(episode)
        truncated = status in TRUNCATED
        info["verdict"] = verdict.info()
        text = (
            f"hermes-agent {TRUNCATED.get(status, 'finished')} after {info['api_calls']} "
            f"model calls. Verifier: {verdict.reason} (reward {verdict.reward:g})."
        )
        return Step(Observation(text), verdict.reward, not truncated, truncated, info)

    async def _free(self, episode: _Episode) -> None:
        if episode.conversation is not None:
            from .backend import detach

            detach(episode.key)
        try:
            await self._shared.prepare().run(episode.sandbox.close())
        except SandboxError:
            pass  # already gone; close() may be called twice

    def _model_url(self, url: str) -> str:
        host = self._shared.config.base_url_host
        if not host:
            return url
        parts = urlsplit(url)
        netloc = host + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))


def _hermes_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hermes-agent")
    except PackageNotFoundError:
        return "missing"
