"""The harness of scripted players: policies an env folder ships that pick text commands.

An env knows its own game well enough to script a player for it (ALFWorld's observing
expert, `roost.envs.alfworld.observing_expert`); the player needs no model and nothing of the
runner. `PlayerAgent` plays one through the runner like any harness, and `load_agent` wraps a
player in it, so `--agent roost.envs.alfworld.observing_expert:ObservingExpert` just works.

A player's `Move` may be a deliberate slip (a learner's mistake, for demonstrations of
recovery): when the env refuses a slip the game is unchanged and the player moves again; a
refused move that is not a slip is the player's bug and ends the episode.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from roost.agents.protocol import AgentError, AgentOutcome, EpisodeContext
from roost.envs.errors import InvalidActionError
from roost.envs.protocol import Reset, Step, TextAction


class Move(Protocol):
    @property
    def command(self) -> str: ...

    @property
    def slip(self) -> bool:
        """A deliberate mistake: the env may refuse it, and the player then moves again."""


class PlayerEpisode(Protocol):
    @property
    def extra(self) -> dict[str, Any]:
        """What the outcome reports beside the turns (e.g. `slips`, the turns of the slips)."""

    def move(self, turn: int) -> Move: ...

    def observe(self, command: str, step: Step) -> None: ...


@runtime_checkable
class Player(Protocol):
    name: str

    def start(self, task_id: str, reset: Reset) -> PlayerEpisode: ...


class PlayerAgent:
    """Plays a scripted player's moves as text actions."""

    needs_model = False
    reset_options: dict[str, Any] = {}

    def __init__(self, player: Player) -> None:
        self.player = player
        self.name = player.name

    async def run(self, ctx: EpisodeContext) -> AgentOutcome:
        episode = self._call(self.player.start, ctx.task.id, ctx.reset)
        for turn in range(ctx.max_turns):
            move = self._call(episode.move, turn)
            try:
                step = await ctx.step(TextAction(move.command))
            except InvalidActionError:
                if not move.slip:
                    raise
                continue
            self._call(episode.observe, move.command, step)
            if step.done:
                return AgentOutcome(turns=turn + 1, stop_reason="done", extra=episode.extra)
        return AgentOutcome(turns=ctx.max_turns, stop_reason="max_turns", extra=episode.extra)

    def _call(self, method: Any, *args: Any) -> Any:
        """A player that cannot go on stops the episode as the harness's failure, not a crash."""
        try:
            return method(*args)
        except Exception as exc:  # noqa: BLE001 - the player is harness code: any failure is the harness's
            raise AgentError(f"{self.name}: {exc}") from exc
