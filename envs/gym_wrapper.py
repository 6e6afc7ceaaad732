"""A `gymnasium.Env` over any roost env, in-process or behind a server.

    env = GymEnv.make("alfworld")                      # in this process
    env = GymEnv.connect("http://127.0.0.1:8000")      # against `roost serve alfworld`
    obs, info = env.reset(seed=0, options={"split": "valid_seen"})
    obs, reward, terminated, truncated, info = env.step("go to countertop 1")

Observations and actions are `Text` spaces. An action is a string, or a dict
`{"name": ..., "arguments": ...}` for a tool call. A non-admissible action does not
raise: the step returns the error as the observation, reward 0, and
`info["invalid_action"]`, as text agents expect. `info["tools"]` holds the env's tool
schemas. The wrapper drives the async env on its own event loop, so it must not be
used from inside a running one.
"""

from __future__ import annotations

import asyncio
import string
from typing import Any

import gymnasium
from gymnasium.spaces import Text

from roost.envs.errors import InvalidActionError
from roost.envs.protocol import Action, Env, Task, TextAction, ToolCall

CHARSET = string.printable
MAX_TEXT = 1 << 16


class GymEnv(gymnasium.Env):
    metadata = {"render_modes": []}

    def __init__(self, env: Env, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.env = env
        self.observation_space = Text(max_length=MAX_TEXT, min_length=0, charset=CHARSET)
        self.action_space = Text(max_length=MAX_TEXT, min_length=1, charset=CHARSET)
        self._loop = loop or asyncio.new_event_loop()
        self._last_text = ""

    @classmethod
    def make(cls, name: str, **kwargs: Any) -> GymEnv:
        from roost.envs.registry import make_env

        return cls(make_env(name, **kwargs))

    @classmethod
    def connect(cls, base_url: str) -> GymEnv:
        from roost.envs.client import RemoteEnv

        loop = asyncio.new_event_loop()
        return cls(loop.run_until_complete(RemoteEnv.connect(base_url)), loop)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        """`options` may hold `task_id` and `split`; anything else goes to the env's own reset options."""
        super().reset(seed=seed)
        options = dict(options or {})
        task_id, split = options.pop("task_id", None), options.pop("split", None)
        reset = self._run(self.env.reset(task_id=task_id, seed=seed, split=split, options=options))
        self._last_text = reset.observation.text
        return reset.observation.text, {**reset.info, "task_id": reset.task_id, "tools": reset.tools}

    def step(self, action: str | dict[str, Any]) -> tuple[str, float, bool, bool, dict]:
        try:
            step = self._run(self.env.step(_action(action)))
        except InvalidActionError as exc:
            return str(exc), 0.0, False, False, {"invalid_action": str(exc)}
        self._last_text = step.observation.text
        info = dict(step.info)
        if step.tools is not None:
            info["tools"] = step.tools
        return step.observation.text, step.reward, step.terminated, step.truncated, info

    def tasks(self, split: str) -> list[Task]:
        return self._run(self.env.tasks(split))

    def render(self) -> str:
        return self._last_text

    def close(self) -> None:
        if not self._loop.is_closed():
            self._run(self.env.close())
            self._loop.close()

    def _run(self, coro):
        return self._loop.run_until_complete(coro)


def _action(action: str | dict[str, Any]) -> Action:
    if isinstance(action, str):
        return TextAction(action)
    if isinstance(action, dict) and "name" in action:
        return ToolCall(action["name"], action.get("arguments", "{}"), action.get("id"))
    raise InvalidActionError(f"an action is a string or a tool call dict with 'name' and 'arguments', got {action!r}")
