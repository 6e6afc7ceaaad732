"""One episode's desktop, whoever provides it: roost's desktops, or OSWorld's own DesktopEnv (`official`).

A `DesktopSession` does the four things an episode needs (observe, run an action, evaluate,
close), so `env.OSWorldEnv` reads the same for both providers. Roost's session starts a
desktop (`backends`), talks to its control server (`DesktopClient`), runs the task's config
steps (`config_steps`) and evaluates with OSWorld's getters and metrics (`evaluator`). A
desktop that stops answering turns into `EnvFaultError` here, once, for every caller.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from roost.envs.errors import EnvFaultError
from roost.envs.protocol import Observation

from .actions import ActionSpace, DesktopAction
from .observations import ObservationConfig, observe

if TYPE_CHECKING:
    from .backends import Desktop, DesktopPool
    from .desktop_client import DesktopClient
    from .official import OfficialOptions
    from .tasks import OSWorldTask

T = TypeVar("T")
log = logging.getLogger(__name__)
NOTE_CHARS = 2000
"""Longest action output or error quoted back to the agent (the tail is kept)."""


@dataclass(frozen=True)
class SessionOptions:
    provider: Literal["roost", "osworld"]
    backend: Literal["local", "docker"]
    width: int
    height: int
    cache_dir: Path
    observation: ObservationConfig
    action_space: ActionSpace
    step_timeout_s: float
    official: OfficialOptions
    ready_timeout_s: float = 20.0
    """How long a new desktop may take to settle after its config steps (see `settle`)."""
    desktops: DesktopPool | None = None
    """Where roost's desktops come from: one pool per env factory, so the local backend's host
    probes (its python, bubblewrap) run once, not at every reset; None: a pool of this session's own."""


@dataclass(frozen=True)
class ActionOutcome:
    """What running an action's code did."""

    returncode: int | None
    output: str
    error: str
    timed_out: bool
    timeout_s: float

    def note(self) -> str:
        """What the agent is told about it (nothing when it ran quietly)."""
        if self.timed_out:
            return f"The action ran past {self.timeout_s:g}s and was stopped."
        if self.returncode not in (0, None):
            return f"The action failed (exit status {self.returncode}):\n{_tail(self.error or self.output)}"
        return f"The action printed:\n{_tail(self.output)}" if self.output.strip() else ""

    def info(self) -> dict[str, Any]:
        return {
            "returncode": self.returncode,
            "timed_out": self.timed_out,
            "output": _tail(self.output),
            "error": _tail(self.error),
        }


@dataclass(frozen=True)
class Evaluation:
    reward: float
    details: dict[str, Any] = field(default_factory=dict)

    def info(self) -> dict[str, Any]:
        return {"reward": self.reward, "success": self.reward >= 1.0, "evaluation": self.details}


class DesktopSession(Protocol):
    async def observe(self, instruction: str, note: str = "") -> Observation: ...

    async def run(self, action: DesktopAction) -> ActionOutcome: ...

    async def evaluate(self, task: OSWorldTask, history: list[Any]) -> Evaluation: ...

    def describe(self) -> dict[str, Any]: ...

    async def close(self) -> None: ...


async def open_session(options: SessionOptions, task: OSWorldTask) -> DesktopSession:
    """A desktop with the task's config steps done."""
    if options.provider == "osworld":
        from .official import OfficialSession

        return await OfficialSession.open(options, task)
    return await RoostSession.open(options, task)


class RoostSession:
    def __init__(self, options: SessionOptions, desktop: Desktop, client: DesktopClient, task_id: str) -> None:
        from .config_steps import TaskContext
        from .file_cache import FileCache

        self.options = options
        self.desktop = desktop
        self.client = client
        self.versions: dict[str, str] = {}
        self._fresh_tree: str | None = None
        """The tree the settle after the config steps read last: the first observation's."""
        self.work_dir = Path(tempfile.mkdtemp(prefix=f"roost-osworld-{_safe(task_id)}-"))
        self.context = TaskContext(
            task_id,
            client,
            desktop.host,
            desktop.server_port,
            desktop.chromium_port,
            FileCache(options.cache_dir),
            self.work_dir,
            (options.width, options.height),
        )

    @classmethod
    async def open(cls, options: SessionOptions, task: OSWorldTask) -> RoostSession:
        from .backends import DesktopConfig, DesktopPool
        from .desktop_client import DesktopClient
        from .errors import UnsupportedTask
        from .evaluator import unsupported_reason

        reason = await asyncio.to_thread(unsupported_reason, task)  # before a desktop starts for nothing
        if reason is not None:
            raise UnsupportedTask(task.id, reason)
        pool = options.desktops or DesktopPool(DesktopConfig(options.backend, options.width, options.height))
        try:
            desktop = await pool.start()
        except Exception as exc:
            raise EnvFaultError(f"could not start a {options.backend} desktop: {type(exc).__name__}: {exc}") from exc
        session = cls(options, desktop, DesktopClient(desktop.url, timeout_s=30.0), task.id)
        try:
            session.versions = await session._guard(pool.versions(session.client), "reported its versions")
            await session._guard(session._configure(task), "ran the task's config steps")
            await session._guard(session._settle(task), "settled after its config steps")
        except BaseException:
            await session.close()
            raise
        return session

    async def observe(self, instruction: str, note: str = "") -> Observation:
        tree, self._fresh_tree = self._fresh_tree, None  # the tree read while settling, once
        # /health checks the X server too: an a11y-only observation would not notice it gone.
        observation, healthy = await asyncio.gather(
            self._guard(observe(self.client, self.options.observation, instruction, note, tree), "was observed"),
            self.client.health(),
        )
        if not healthy:
            raise EnvFaultError(
                "the desktop's X server or control server is gone (GET /health failed); "
                "the episode is an infra error and its desktop is stopped"
            )
        return observation

    async def run(self, action: DesktopAction) -> ActionOutcome:
        timeout_s = self.options.step_timeout_s
        result = await self._guard(self.client.run_python(action.script, timeout_s=timeout_s), "ran an action")
        return ActionOutcome(result.returncode, result.output, result.error, result.timed_out, timeout_s)

    async def evaluate(self, task: OSWorldTask, history: list[Any]) -> Evaluation:
        from .evaluator import evaluate

        agent_failed = bool(history) and history[-1] == "FAIL"
        result = await self._guard(evaluate(task, self.context, agent_failed=agent_failed), "was evaluated")
        return Evaluation(float(result.reward), {"scores": [{"func": s.func, "score": s.score} for s in result.scores]})

    def describe(self) -> dict[str, Any]:
        return {
            "provider": "roost",
            "backend": self.options.backend,
            "screen": [self.options.width, self.options.height],
            "versions": self.versions,
        }

    async def close(self) -> None:
        try:
            await self.client.aclose()
            await self.desktop.close()
        finally:
            await asyncio.to_thread(shutil.rmtree, self.work_dir, True)

    async def _configure(self, task: OSWorldTask) -> None:
        from .config_steps import run_steps

        await run_steps(task.config, self.context)

    async def _settle(self, task: OSWorldTask) -> None:
        from .settle import expects_apps, settle

        settled = await settle(
            self.client.accessibility_tree, wants_apps=expects_apps(task.config), timeout_s=self.options.ready_timeout_s
        )
        self._fresh_tree = settled.tree
        if not settled.stable:
            log.warning(
                "task %s: the desktop's accessibility tree did not settle within %.0fs; observing it as it is",
                task.id,
                self.options.ready_timeout_s,
            )

    async def _guard(self, work: Awaitable[T], doing: str) -> T:
        """`work`, with a lost desktop turned into an env fault (and the desktop checked once)."""
        from .desktop_client import DesktopError

        try:
            return await work
        except DesktopError as exc:
            alive = await self.desktop.alive()
            state = "is still up but its control server failed" if alive else "died"
            raise EnvFaultError(
                f"the desktop {state} while it {doing}: {exc}; the episode is an infra error and its desktop is stopped"
            ) from exc


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:40]


def _tail(text: str) -> str:
    return text if len(text) <= NOTE_CHARS else "[...]" + text[-NOTE_CHARS:]
