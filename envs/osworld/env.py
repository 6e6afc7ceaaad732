"""OSWorld behind roost's Env protocol: a real desktop per episode, OSWorld's tasks, actions and evaluators.

    factory = make_factory(tasks="~/OSWorld/evaluation_examples", observation_type="screenshot_a11y_tree")
    env = factory(); r = await env.reset(task_id="..."); s = await env.step(TextAction("pyautogui.click(10, 20)"))

reset   starts a desktop (`backends`: local Xvfb or a container), runs the task's config steps
        (`config_steps`), and observes (`observations`)
step    runs the action (`actions`: pyautogui code, computer_13 dicts, WAIT/FAIL/DONE, or the tools)
        in the desktop, killed at `step_timeout_s`, then observes; DONE, FAIL and `max_steps` end
        the episode with the evaluator's reward (`evaluator`: OSWorld's getters and metrics)
close   stops the desktop

A task that cannot run here (`UnsupportedTask`: it needs the internet, an account, a file
missing from the cache) fails its reset with the reason, and is never scored. A desktop that
dies or stops answering is an environment fault (`EnvFaultError` → the runner's
`infra_error`); the dead desktop is stopped and the next reset starts a fresh one.
`provider="osworld"` runs OSWorld's own `DesktopEnv` instead (`official`).

`info` (the env server's /info) lists the applications the desktops run and their versions
(`desktop/versions.py`), and so does each episode's info (`versions`), so a task that breaks
after an update names what changed.

Reset option `expert_plan` (bool): after reset and every step, `info["expert_plan"]` holds the
scripted expert's next action for the task (`expert`: fixture tasks carry their solution), read
off the observation's accessibility tree, so it needs an a11y observation type.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from roost.envs.errors import BadRequestError, EnvFaultError, EpisodeFinishedError
from roost.envs.protocol import Action, EnvInfo, Observation, Reset, Step, Task

from .actions import ActionSpace, DesktopAction, parse
from .backends import DesktopConfig, DesktopPool
from .desktop.versions import application_versions
from .expert import ExpertPlanner, NoExpertSolution
from .fixtures import ensure_fixtures
from .observations import ObservationConfig, ObservationType
from .official import OfficialOptions, check_official
from .providers import DesktopSession, SessionOptions, open_session
from .task_set import TaskSet, default_tasks_dir
from .tasks import TaskEntry
from .tool_actions import tools

VERSION = "roost-osworld-1"
RESET_OPTIONS = ("expert_plan",)
MAX_DESKTOPS = 64


class OSWorldEnvConfig(BaseModel):
    """Keyword arguments of `make_factory` (and `--env-arg` of `roost serve osworld`)."""

    model_config = ConfigDict(extra="forbid")

    tasks: str | None = None
    """A task file, or a folder in OSWorld's layout (evaluation_examples/); None: roost's fixture set
    (written to $ROOST_HOME/osworld on first use)."""
    data_dir: str | None = None
    """The same as `tasks` (when `tasks` is unset): what `roost serve osworld --data-dir DIR` passes, and
    with `--docker` the folder mounted at /data."""
    cache_dir: str | None = None
    """Files the tasks' `download` steps and cache getters read; None: `<tasks folder>/cache`."""
    provider: Literal["roost", "osworld"] = "roost"
    """`roost`: roost's desktops (`backend`); `osworld`: OSWorld's own DesktopEnv and its VM providers."""
    backend: Literal["local", "docker"] = "local"
    """Where roost's desktops run: on this host's Xvfb (`local`), or one container each (`docker`)."""
    width: int = Field(1280, ge=320, le=7680)
    height: int = Field(720, ge=240, le=4320)
    observation_type: ObservationType = "a11y_tree"
    action_space: ActionSpace = "pyautogui"
    max_steps: int = Field(15, gt=0)
    """Actions per episode; past it the episode is truncated and evaluated (as OSWorld's runner does)."""
    step_timeout_s: float = Field(30.0, gt=0)
    """How long one action's code may run before it is killed."""
    settle_s: float = Field(0.3, ge=0)
    """Pause after an action before observing (OSWorld pauses 2 s)."""
    wait_s: float = Field(1.0, ge=0)
    """How long WAIT waits."""
    ready_timeout_s: float = Field(20.0, ge=0)
    """How long a reset waits, after the task's config steps, for the launched applications to show
    in the accessibility tree (they register a moment after their windows show): an empty tree is
    read again until it holds them and reads the same twice in a row. Past it the desktop is
    observed as it is."""
    max_tree_chars: int | None = Field(None, gt=0)
    """Cut the accessibility table past this many characters."""
    official: OfficialOptions = OfficialOptions()
    """OSWorld's own provider (provider="osworld"): its provider name and VM image."""


@dataclass
class OSWorldShared:
    """What all envs of one factory share: the config and the task set."""

    config: OSWorldEnvConfig
    task_set: TaskSet
    cache_dir: Path
    desktops: DesktopPool | None = None
    """roost's desktops, started by one pool (None for provider="osworld")."""
    versions: dict[str, str] = field(default_factory=dict)
    """The desktops' applications and their versions, for /info: those of this host for local
    desktops (they run its applications); none known before a desktop starts for the others."""


def make_factory(**kwargs: Any):
    """Load the tasks once; the factory makes one env per episode (each with its own desktop)."""
    config = OSWorldEnvConfig(**kwargs)
    tasks = config.tasks or config.data_dir
    source = Path(tasks).expanduser() if tasks else ensure_fixtures(default_tasks_dir())
    if not source.exists():
        raise BadRequestError(
            f"no OSWorld tasks at {source}; pass tasks=PATH (a task file or an OSWorld "
            "evaluation_examples folder) or write roost's fixture set there with "
            "`roost envs osworld make-fixtures`"
        )
    if config.provider == "osworld":
        check_official(config.official)
    task_set = TaskSet.load(source)
    folder = source if source.is_dir() else source.parent
    cache_dir = Path(config.cache_dir).expanduser() if config.cache_dir else folder / "cache"
    shared = OSWorldShared(config, task_set, cache_dir)
    if config.provider == "roost":
        # Bounded by the env server's max_episodes; this bound only guards a runaway caller.
        shared.desktops = DesktopPool(
            DesktopConfig(backend=config.backend, width=config.width, height=config.height), max_desktops=MAX_DESKTOPS
        )
    if config.provider == "roost" and config.backend == "local":
        shared.versions = application_versions()
    return lambda: OSWorldEnv(shared)


@dataclass
class _Episode:
    entry: TaskEntry
    session: DesktopSession
    steps: int = 0
    done: bool = False
    history: list[Any] = field(default_factory=list)
    expert: ExpertPlanner | None = None


class OSWorldEnv:
    info_keys = frozenset(
        {
            "task_id",
            "domain",
            "steps",
            "max_steps",
            "observation_type",
            "action_space",
            "infeasible",
            "provider",
            "backend",
            "osworld_provider",
            "screen",
            "versions",  # the desktop's own
            "returncode",
            "timed_out",
            "output",
            "error",  # a code action's run
            "reward",
            "success",
            "evaluation",
            "exit_reason",
            "expert_plan",
        }
    )

    def __init__(self, shared: OSWorldShared) -> None:
        self._shared = shared
        self._episode: _Episode | None = None

    @property
    def info(self) -> EnvInfo:
        config = self._shared.config
        return EnvInfo(
            "osworld",
            VERSION,
            tools(),
            tuple(self._shared.task_set.splits),
            f"OSWorld desktop tasks ({config.provider} provider, {config.observation_type} "
            f"observations, {config.action_space} actions) from {self._shared.task_set.source}.",
            self._shared.versions,
        )

    async def tasks(self, split: str) -> list[Task]:
        return self._shared.task_set.tasks(split)

    async def reset(
        self,
        *,
        task_id: str | None = None,
        seed: int | None = None,
        split: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> Reset:
        unknown = sorted(set(options or {}) - set(RESET_OPTIONS))
        if unknown:
            raise BadRequestError(f"unknown reset option(s) {unknown}; the OSWorld env takes {list(RESET_OPTIONS)}")
        entry = self._shared.task_set.choose(task_id, seed, split)
        expert = self._expert(entry) if (options or {}).get("expert_plan") else None
        await self.close()
        session = await open_session(self._session_options(), entry.task)
        self._episode = _Episode(entry, session, expert=expert)
        try:
            observation = await session.observe(entry.task.instruction)
        except BaseException:
            await self.close()
            raise
        info = self._info(self._episode)
        return Reset(entry.task.id, observation, tools(), {**info, **self._plan(self._episode, observation)})

    async def step(self, action: Action) -> Step:
        episode = self._episode
        if episode is None:
            raise EpisodeFinishedError("no episode is running; call reset first")
        if episode.done:
            raise EpisodeFinishedError("this episode has ended (DONE, FAIL or out of steps); reset to start another")
        desktop_action = parse(action, self._shared.config.action_space)
        episode.steps += 1
        episode.history.append(desktop_action.record)
        try:
            return await self._run(episode, desktop_action)
        except EnvFaultError:
            episode.done = True
            await self.close()
            raise

    async def close(self) -> None:
        episode, self._episode = self._episode, None
        if episode is not None:
            await episode.session.close()

    def _session_options(self) -> SessionOptions:
        config = self._shared.config
        return SessionOptions(
            provider=config.provider,
            backend=config.backend,
            width=config.width,
            height=config.height,
            cache_dir=self._shared.cache_dir,
            observation=ObservationConfig(config.observation_type, "ubuntu", config.max_tree_chars),
            action_space=config.action_space,
            step_timeout_s=config.step_timeout_s,
            official=config.official,
            ready_timeout_s=config.ready_timeout_s,
            desktops=self._shared.desktops,
        )

    async def _run(self, episode: _Episode, action: DesktopAction) -> Step:
        config, session = self._shared.config, episode.session
        info: dict[str, Any] = {}
        note = ""
        if action.kind == "code":
            outcome = await session.run(action)
            info.update(outcome.info())
            note = outcome.note()
        elif action.kind == "WAIT":
            await asyncio.sleep(config.wait_s)
        if action.kind in ("DONE", "FAIL") or episode.steps >= config.max_steps:
            return await self._finish(episode, action, info, note)
        await asyncio.sleep(config.settle_s)
        observation = await session.observe(episode.entry.task.instruction, note)
        return Step(observation, 0.0, False, False, {**self._info(episode), **info, **self._plan(episode, observation)})

    @staticmethod
    def _expert(entry: TaskEntry) -> ExpertPlanner:
        try:
            return ExpertPlanner(entry.task.model_dump())
        except NoExpertSolution as exc:
            raise BadRequestError(str(exc)) from None

    @staticmethod
    def _plan(episode: _Episode, observation: Observation) -> dict[str, Any]:
        if episode.expert is None:
            return {}
        return {"expert_plan": [episode.expert.next_action(observation.accessibility_tree)]}

    async def _finish(self, episode: _Episode, action: DesktopAction, info: dict[str, Any], note: str) -> Step:
        episode.done = True
        terminated = action.kind in ("DONE", "FAIL")
        try:
            evaluation = await episode.session.evaluate(episode.entry.task, episode.history)
        finally:  # scored or not (an evaluator that cannot run here), the desktop is done
            await self.close()
        reason = action.kind.lower() if terminated else "step_limit"
        text = "\n\n".join(
            part
            for part in (
                f"Task: {episode.entry.task.instruction}",
                note,
                f"Episode over ({reason}); reward {evaluation.reward:g}.",
            )
            if part
        )
        info = {**self._info(episode), **info, **evaluation.info(), "exit_reason": reason}
        return Step(Observation(text), evaluation.reward, terminated, not terminated, info)

    def _info(self, episode: _Episode) -> dict[str, Any]:
        config, task = self._shared.config, episode.entry.task
        return {
            "task_id": task.id,
            "domain": episode.entry.domain,
            "steps": episode.steps,
            "max_steps": config.max_steps,
            "observation_type": config.observation_type,
            "action_space": config.action_space,
            "infeasible": task.infeasible,
            **episode.session.describe(),
        }
