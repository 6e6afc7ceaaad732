"""ALFWorld behind the Env protocol, in this process."""

from __future__ import annotations

from pathlib import Path

import pytest

from roost.envs.alfworld.env import make_factory
from roost.envs.errors import BadRequestError, EpisodeFinishedError, InvalidActionError, UnknownTaskError
from roost.envs.protocol import Env, TextAction, ToolCall


@pytest.fixture
async def env(alfworld_data: Path):
    env = make_factory(str(alfworld_data))()
    yield env
    await env.close()


async def test_reset_offers_admissible_commands_in_text_and_as_the_tool_enum(env: Env):
    assert isinstance(env, Env)
    task = (await env.tasks("valid_seen"))[0]
    reset = await env.reset(task_id=task.id)
    assert reset.task_id == task.id and "Your task is to:" in reset.observation.text
    commands = reset.info["admissible_commands"]
    assert "look" in commands and all(f"- {c}" in reset.observation.text for c in commands)
    (tool,) = reset.tools
    assert tool["function"]["name"] == "act"
    assert tool["function"]["parameters"]["properties"]["command"]["enum"] == commands
    assert [t["function"]["name"] for t in env.info.tools] == ["act"]


async def test_seeds_pick_games_reproducibly(env: Env):
    first = await env.reset(seed=5, split="train")
    again = await env.reset(seed=5, split="train")
    assert first.task_id == again.task_id and first.observation == again.observation


async def test_the_planner_plan_wins_the_game(env: Env):
    reset = await env.reset(task_id=(await env.tasks("train"))[1].id, options={"expert_plan": True})
    info, step = reset.info, None
    while step is None or not step.done:
        step = await env.step(ToolCall("act", {"command": info["expert_plan"][0]}))
        info = step.info
    assert (step.reward, step.terminated, step.truncated, step.info["won"]) == (1.0, True, False, True)
    with pytest.raises(EpisodeFinishedError):
        await env.step(TextAction("look"))


async def test_bad_actions_are_refused_and_leave_the_game_unchanged(env: Env):
    reset = await env.reset(seed=1)
    with pytest.raises(InvalidActionError, match="not an admissible command.*Admissible commands: "):
        await env.step(TextAction("fly to the moon"))
    with pytest.raises(InvalidActionError, match="not valid JSON"):
        await env.step(ToolCall("act", '{"command": '))
    with pytest.raises(InvalidActionError, match="unknown tool 'teleport'"):
        await env.step(ToolCall("teleport", {"command": "look"}))
    with pytest.raises(InvalidActionError, match="string argument 'command'"):
        await env.step(ToolCall("act", {"cmd": "look"}))
    step = await env.step(TextAction("  Look. "))  # case, spaces and a final period are forgiven
    assert step.info["steps"] == 1 and not step.done
    assert reset.info["admissible_commands"] == step.info["admissible_commands"]


async def test_episodes_are_truncated_after_max_steps(alfworld_data: Path):
    env = make_factory(str(alfworld_data), max_steps=4)()
    await env.reset(seed=2)
    steps = [await env.step(TextAction("look")) for _ in range(4)]
    assert [s.truncated for s in steps] == [False, False, False, True]
    assert not any(s.terminated for s in steps)
    await env.close()


async def test_unknown_tasks_splits_and_options_are_named(env: Env):
    with pytest.raises(UnknownTaskError, match="no task 'nope' in any split"):
        await env.reset(task_id="nope")
    with pytest.raises(BadRequestError, match="unknown split 'test'"):
        await env.tasks("test")
    with pytest.raises(BadRequestError, match="unknown reset option"):
        await env.reset(seed=0, options={"hard_mode": True})


async def test_missing_data_says_how_to_get_it(tmp_path: Path):
    from roost.envs.alfworld.catalog import AlfworldDataMissing

    with pytest.raises(AlfworldDataMissing, match="make-fixtures"):
        make_factory(str(tmp_path))
