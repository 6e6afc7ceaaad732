"""One ALFWorld text game: TextWorld's PDDL backend with ALFWorld's own wrappers.

This is the synchronous core that both the env and the fixture generator play
through. Two quirks of the stack are handled here, once:

- fast-downward's translator overwrites `sys.argv` every time a PDDL problem is
  loaded; callers parse their arguments first, and `preserved_argv` puts the old
  value back.
- every `PddlEnv` dlopens its own copy of the planner library (copying the 30 MB file
  first), and unloading copies while others are loaded corrupts memory (segfaults
  seen after ~50 episodes). So games are never unloaded: a `GamePool` hands a finished
  game to the next episode, which loads its own game file into it, as TextWorld's
  batch envs do. The pool grows to the peak number of live episodes.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@contextlib.contextmanager
def preserved_argv() -> Iterator[None]:
    saved = list(sys.argv)
    try:
        yield
    finally:
        sys.argv[:] = saved


@dataclass
class GameStep:
    """What the game says after a reset or a command."""

    feedback: str
    admissible: list[str]
    won: bool
    expert_plan: list[str] = field(default_factory=list)


class AlfworldGame:
    """A loaded game file, played one command at a time."""

    def __init__(self) -> None:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
        from textworld.envs import PddlEnv

        from .textworld_speedups import install as install_speedups

        install_speedups()
        infos = textworld.EnvInfos(admissible_commands=True, won=True, extras=["gamefile"])
        self._pddl = PddlEnv(infos)
        self._env = AlfredInfos(AlfredDemangler(self._pddl, shuffle=False))
        self._expert_plan = False

    def reset(self, gamefile: str, *, expert_plan: bool = False) -> GameStep:
        """Load and start a game; with `expert_plan`, the planner replans after every step."""
        self._expert_plan = expert_plan
        self._pddl.request_infos.policy_commands = expert_plan
        with preserved_argv():
            self._env.load(gamefile)
            state = self._env.reset()
        return self._to_step(state)

    def step(self, command: str) -> GameStep:
        state, _, _ = self._env.step(command)
        return self._to_step(state)

    def walkthrough(self) -> list[str]:
        """The planner's full solution from the current state."""
        return list(self._pddl._pddl_state.replan(self._pddl._entity_infos))

    def _to_step(self, state: Any) -> GameStep:
        plan = list(state.get("policy_commands") or []) if self._expert_plan else []
        return GameStep(
            feedback=str(state["feedback"]),
            admissible=list(state["admissible_commands"]),
            won=bool(state["won"]),
            expert_plan=plan,
        )


class GamePool:
    """Loaded games waiting for their next episode (see the module docstring for why)."""

    def __init__(self) -> None:
        self._idle: list[AlfworldGame] = []
        self._lock = threading.Lock()

    def take(self) -> AlfworldGame:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return AlfworldGame()

    def give_back(self, game: AlfworldGame) -> None:
        with self._lock:
            self._idle.append(game)

    @contextlib.contextmanager
    def game(self) -> Iterator[AlfworldGame]:
        game = self.take()
        try:
            yield game
        finally:
            self.give_back(game)
