"""The harness of scripted players: an env's player is played move by move, a refused slip is retried,
a refused plain move or a player's own failure ends the episode as the harness's failure."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from roost.agents.player import PlayerAgent
from roost.agents.protocol import AgentError, EpisodeContext
from roost.agents.registry import load_agent
from roost.envs.errors import InvalidActionError
from roost.envs.protocol import Task
from roost.tests.envs.broken_envs import KeptEnv


@dataclass
class Move:
    command: str
    slip: bool = False


@dataclass
class Script:
    """Plays `moves` in turn; `fail_at` raises from the player itself."""

    moves: list[Move]
    fail_at: int | None = None
    seen: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def move(self, turn: int) -> Move:
        if turn == self.fail_at:
            raise ValueError("lost the plot")
        return self.moves[turn]

    def observe(self, command, step) -> None:
        self.seen.append(step.observation.text)


class ScriptedPlayer:
    name = "scripted"

    def __init__(self, script: Script) -> None:
        self.script = script

    def start(self, task_id, reset) -> Script:
        return self.script


async def _play(script: Script):
    env = KeptEnv()
    reset = await env.reset(task_id="count-0")
    ctx = EpisodeContext(Task("count-0", "train"), reset, reset.tools, env.step, max_turns=8)
    return await PlayerAgent(ScriptedPlayer(script)).run(ctx)


async def test_a_refused_slip_is_retried_and_the_episode_plays_to_its_end():
    script = Script([Move("inc"), Move("jump", slip=True), Move("inc"), Move("inc")])
    outcome = await _play(script)
    assert (outcome.turns, outcome.stop_reason) == (4, "done")
    assert script.seen == ["n=1", "n=2", "n=3"]


async def test_a_refused_move_that_is_no_slip_ends_the_episode():
    with pytest.raises(InvalidActionError):
        await _play(Script([Move("jump")]))


async def test_a_players_own_failure_is_the_harness_failure():
    with pytest.raises(AgentError, match="scripted: lost the plot"):
        await _play(Script([Move("inc")], fail_at=1))


def test_load_agent_wraps_an_envs_player():
    agent = load_agent("observing-expert", order="random", seed=3)
    assert isinstance(agent, PlayerAgent) and agent.name == "observing-expert" and not agent.needs_model
    assert load_agent("expert").name == "expert"
