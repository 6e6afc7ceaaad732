"""ALFWorld behind roost's Env protocol.

The admissible commands reach the agent twice: listed in the observation text, and
as the `enum` of the `command` argument of the `act` tool returned with each
observation. A command outside that list is an `InvalidActionError` (the game state
is unchanged). The episode terminates with reward 1 when the task is done and is
truncated after `max_steps` commands.

With `options={"expert_plan": True}` at reset, `info["expert_plan"]` carries the
PDDL planner's plan from the current state after every step (used by the expert agent).
"""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roost.envs.alfworld.catalog import SPLITS, GameCatalog, default_data_dir
from roost.envs.alfworld.game import AlfworldGame, GamePool, GameStep
from roost.envs.errors import BadRequestError, EpisodeFinishedError, InvalidActionError
from roost.envs.protocol import Action, EnvInfo, Observation, Reset, Step, Task, TextAction, ToolSchema

TOOL_NAME = "act"
BANNER = "-= Welcome to TextWorld, ALFRED! =-"


def act_tool(commands: list[str] | None = None) -> ToolSchema:
    command: dict[str, Any] = {"type": "string", "description": "One admissible command, verbatim."}
    if commands:
        command["enum"] = commands
    return {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": "Send one command to the household game, e.g. 'go to countertop 1' "
            "or 'take apple 1 from countertop 1'. Only admissible commands work.",
            "parameters": {
                "type": "object",
                "properties": {"command": command},
                "required": ["command"],
                "additionalProperties": False,
            },
        },
    }


@dataclass
class AlfworldGames:
    """What all envs of one factory share: the game index, a pool of loaded games, and a
    lock around game loads (fast-downward's PDDL translator keeps module-level state, so
    two loads must not interleave in one process)."""

    catalog: GameCatalog
    max_steps: int = 50
    pool: GamePool = field(default_factory=GamePool)
    load_lock: threading.Lock = field(default_factory=threading.Lock)


def make_factory(data_dir: str | None = None, max_steps: int = 50):
    games = AlfworldGames(GameCatalog.load(Path(data_dir) if data_dir else default_data_dir()), max_steps)
    return lambda: AlfworldEnv(games)


class AlfworldEnv:
    info_keys = frozenset({"admissible_commands", "won", "steps", "max_steps", "task_type", "expert_plan"})

    def __init__(self, games: AlfworldGames) -> None:
        self._games = games
        self._game: AlfworldGame | None = None
        self._last: GameStep | None = None
        self._steps = 0
        self._done = False
        self._task: Task | None = None

    @property
    def info(self) -> EnvInfo:
        from alfworld.info import __version__ as alfworld_version

        return EnvInfo(
            "alfworld",
            f"alfworld-{alfworld_version}",
            [act_tool()],
            tuple(SPLITS),
            "ALFWorld household tasks (TextWorld + PDDL).",
        )

    async def tasks(self, split: str) -> list[Task]:
        return self._games.catalog.tasks(split)

    async def reset(
        self,
        *,
        task_id: str | None = None,
        seed: int | None = None,
        split: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> Reset:
        options = dict(options or {})
        expert_plan = bool(options.pop("expert_plan", False))
        if options:
            raise BadRequestError(f"unknown reset option(s) {sorted(options)}; ALFWorld takes 'expert_plan'")
        entry = self._choose(task_id, seed, split)
        if self._game is None:
            self._game = self._games.pool.take()
        state = await asyncio.to_thread(self._load, self._game, entry.gamefile, expert_plan)
        self._task, self._last, self._steps, self._done = entry.task, state, 0, False
        text = state.feedback.replace(BANNER, "").strip()
        return Reset(
            entry.task.id, Observation(self._render(text, state)), [act_tool(state.admissible)], self._info(state)
        )

    async def step(self, action: Action) -> Step:
        if self._game is None or self._last is None:
            raise EpisodeFinishedError("no episode is running; call reset first")
        if self._done:
            raise EpisodeFinishedError("this episode has ended; call reset to start another")
        command = self._command(action)
        state = await asyncio.to_thread(self._game.step, command)
        self._last, self._steps = state, self._steps + 1
        terminated = state.won
        truncated = not terminated and self._steps >= self._games.max_steps
        self._done = terminated or truncated
        return Step(
            Observation(self._render(state.feedback, state)),
            1.0 if state.won else 0.0,
            terminated,
            truncated,
            self._info(state),
            [act_tool(state.admissible)],
        )

    async def close(self) -> None:
        game, self._game, self._last = self._game, None, None
        if game is not None:
            self._games.pool.give_back(game)

    def _load(self, game: AlfworldGame, gamefile: str, expert_plan: bool) -> GameStep:
        with self._games.load_lock:
            return game.reset(gamefile, expert_plan=expert_plan)

    def _choose(self, task_id: str | None, seed: int | None, split: str | None):
        catalog = self._games.catalog
        if task_id is not None:
            return catalog.get(split, task_id)
        entries = catalog.entries(split or "train")
        if not entries:
            raise BadRequestError(f"split {split or 'train'!r} of {catalog.data_dir} holds no games")
        return random.Random(seed).choice(entries)

    def _command(self, action: Action) -> str:
        if isinstance(action, TextAction):
            raw: Any = action.text
        elif action.name != TOOL_NAME:
            raise InvalidActionError(f"unknown tool {action.name!r}; ALFWorld offers one tool, {TOOL_NAME!r}")
        else:
            raw = action.parsed_arguments().get("command")
            if not isinstance(raw, str):
                raise InvalidActionError(f"tool {TOOL_NAME!r} needs a string argument 'command', got {raw!r}")
        command = " ".join(raw.strip().rstrip(".").lower().split())
        admissible = self._last.admissible if self._last is not None else []
        if command not in admissible:
            raise InvalidActionError(
                f"{raw.strip()[:200]!r} is not an admissible command here. Admissible commands: {', '.join(admissible)}"
            )
        return command

    def _info(self, state: GameStep) -> dict[str, Any]:
        info: dict[str, Any] = {
            "admissible_commands": state.admissible,
            "won": state.won,
            "steps": self._steps,
            "max_steps": self._games.max_steps,
        }
        if self._task is not None:
            info["task_type"] = self._task.metadata.get("task_type")
        if state.expert_plan:
            info["expert_plan"] = state.expert_plan
        return info

    @staticmethod
    def _render(text: str, state: GameStep) -> str:
        commands = "\n".join(f"- {c}" for c in state.admissible)
        return f"{text}\n\nAdmissible commands:\n{commands}"
