"""The async Env protocol and the records it exchanges.

An `Env` plays one episode at a time: `reset` starts one (by task id or seed), `step`
applies an action, `close` frees what the env holds. An action is plain text or a
tool call; an observation is text, optionally with an image and an accessibility
tree. Each env publishes its tools as OpenAI function schemas, so an LLM harness
can pass them to the model as they are. `terminated` (the task reached an end state)
and `truncated` (a limit cut the episode short) are kept apart, as in Gymnasium.

Invariants env authors keep (`roost envs check` runs them: `roost.envs.conformance`):
- `reset` may be called again at any time and starts a fresh episode; a task id the split
  does not hold raises `UnknownTaskError`; the same seed starts the same task.
- an `InvalidActionError` from `step` leaves the episode unchanged.
- `step` with no episode running (before the first reset, after the episode ended) raises
  `EpisodeFinishedError`.
- the env class declares `info_keys`, a frozenset of every key its `info` dicts may hold.
- `close` frees what the env holds (its processes included) and may be called twice.
- any other exception from `reset` or `step` is an environment fault.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from roost.envs.errors import InvalidActionError
from roost.serving.json_bounds import check_json, load_json

ToolSchema = dict[str, Any]
"""An OpenAI function tool: `{"type": "function", "function": {"name", "description", "parameters"}}`."""


@dataclass(frozen=True)
class TextAction:
    text: str


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str | dict[str, Any]
    """The JSON text the model produced (as OpenAI returns it), or already parsed."""
    id: str | None = None

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a dict; malformed JSON, or JSON past `roost.serving.json_bounds`, is the
        agent's error, not the env's."""
        if isinstance(self.arguments, dict):
            check_json(self.arguments, self.arguments_label, error=InvalidActionError)
            return self.arguments
        try:
            value = load_json(self.arguments or "{}", self.arguments_label, error=InvalidActionError)
        except json.JSONDecodeError as exc:
            raise InvalidActionError(
                f"{self.arguments_label} are not valid JSON ({exc.msg} at {exc.pos}): {self.arguments[:200]!r}"
            ) from None
        if not isinstance(value, dict):
            raise InvalidActionError(f"{self.arguments_label} must be a JSON object, got {value!r:.200}")
        return value

    @property
    def arguments_label(self) -> str:
        """How messages name the arguments."""
        return f"arguments of tool {self.name!r}"


Action = TextAction | ToolCall


def check_action(action: Action) -> None:
    """Raise `InvalidActionError` where a tool call's object arguments are past `roost.serving.json_bounds`:
    done where an action enters (a server, an episode manager) before anything pickles it."""
    if isinstance(action, ToolCall) and not isinstance(action.arguments, str):
        check_json(action.arguments, action.arguments_label, error=InvalidActionError)


@dataclass(frozen=True)
class Observation:
    text: str
    image: str | None = None
    """A base64-encoded PNG, when the env renders one."""
    accessibility_tree: str | None = None


@dataclass(frozen=True)
class Task:
    id: str
    split: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EnvInfo:
    name: str
    version: str
    tools: list[ToolSchema]
    splits: tuple[str, ...]
    description: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    """The software the env runs, by name → version (OSWorld: its desktops' applications)."""


@dataclass(frozen=True)
class Reset:
    task_id: str
    observation: Observation
    tools: list[ToolSchema]
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    observation: Observation
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)
    tools: list[ToolSchema] | None = None
    """The tools for the next step, when they changed (for example a new enum of commands)."""

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


@runtime_checkable
class Env(Protocol):
    @property
    def info(self) -> EnvInfo: ...

    async def tasks(self, split: str) -> list[Task]: ...

    async def reset(
        self,
        *,
        task_id: str | None = None,
        seed: int | None = None,
        split: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> Reset: ...

    async def step(self, action: Action) -> Step: ...

    async def close(self) -> None: ...


@runtime_checkable
class HasWorkspace(Protocol):
    """An env whose episodes act on a working tree (SWE's repository) hands a copy of it out, so
    a harness acting on a host folder of its own (`roost run --workspace`) starts from it."""

    async def workspace(self) -> bytes:
        """The running episode's working tree as a gzip'd tar (its `.git` included)."""
        ...


EnvFactory = Callable[[], Env]
"""Makes a fresh env; envs made by one factory may share read-only state (a task index)."""
