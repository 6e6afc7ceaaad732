"""The judge as a reward source: a real scripted engine behind a real gateway judges ALFWorld
episodes recorded by another gateway into the same store."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from roost.agents.judge import Judge, JudgeError, Rubric
from roost.agents.runner import RunConfig, run_episodes
from roost.agents.tool_agent import ToolAgent
from roost.envs.episodes import EpisodeManager, ManagerConfig
from roost.envs.worker import WorkerConfig
from roost.rollout.gateway.control.client import GatewayClient
from roost.rollout.keys import bearer
from roost.tests.agents.conftest import start_gateway
from roost.trainer.rl.rollouts import unfinished_backlog


@pytest.fixture
def judge_gateway(scripted_engine_url: str, tmp_path: Path, admin_key: str):
    """The judge's own gateway, recording into the store of `scripted_gateway` (the policy's)."""
    with start_gateway(scripted_engine_url, tmp_path / "trajectories.sqlite", admin_key) as url:
        yield url


def _says(reply: str, **rubric) -> Rubric:
    """A rubric whose judge (the scripted engine) is made to answer `reply`."""
    return Rubric(sampling={"custom_params": {"scripted_reply": reply}}, **rubric)


async def _judged(alfworld_data: Path, policy_url: str, admin_key: str, judges: dict[str, Judge]):
    """An ALFWorld episode of the tool agent (the scripted engine's "OK.") judged by each judge, in
    the run named for it; the results by run, and the trainer's backlog of the policy's gateway."""
    manager = EpisodeManager(WorkerConfig("alfworld", {"data_dir": str(alfworld_data)}), ManagerConfig(workers=1))
    results = {}
    async with manager, GatewayClient(policy_url, admin_key=admin_key) as gateway:
        tasks = (await manager.tasks("train"))[:1]
        for run_id, judge in judges.items():
            run = RunConfig(concurrency=1, max_turns=1, run_id=run_id, progress=False)
            async with judge:
                [results[run_id]] = await run_episodes(tasks, manager, ToolAgent(max_tokens=8), [], run, gateway, judge)
        backlog = await unfinished_backlog(gateway, set(), 1)
    return results, backlog


def _get(url: str, path: str, admin_key: str, **params) -> dict:
    return httpx.get(f"{url}{path}", params=params, headers=bearer(admin_key)).json()


async def test_the_judge_s_verdict_is_the_reward_and_its_call_is_recorded_in_a_session_of_its_own(
    alfworld_data: Path, scripted_gateway: str, judge_gateway: str, admin_key: str
):
    rubric = _says("The agent only said OK.\nSCORE: 0.8", scale=(0, 1))
    judge = Judge("critic", rubric, GatewayClient(judge_gateway, admin_key=admin_key))
    results, backlog = await _judged(alfworld_data, scripted_gateway, admin_key, {"judged": judge})
    result = results["judged"]
    assert (result.status, result.reward, result.reward_source, result.env_reward) == ("ok", 0.8, "judge", 0.0)
    episode = _get(scripted_gateway, f"/sessions/{result.session_id}", admin_key)
    [posted] = episode["rewards"]
    assert posted["reward"] == 0.8 and posted["info"]["source"] == "judge" and posted["info"]["env_reward"] == 0.0
    assert episode["outcome"]["reward_source"] == "judge"
    # the judge's call: in its own session, group judge/RUN/TASK, naming the episode it judged
    [listed] = _get(judge_gateway, "/sessions", admin_key, group=f"judge/judged/{result.task_id}")["sessions"]
    assert listed["session_id"] == result.judge_session_id != result.session_id
    assert listed["metadata"]["judged_session"] == result.session_id
    assert listed["outcome"]["kind"] == "judge" and listed["outcome"]["reward"] == 0.8
    [call] = _get(judge_gateway, f"/sessions/{result.judge_session_id}", admin_key)["calls"]
    prompt = call["request"]["messages"][0]["content"]
    assert "[assistant] OK." in prompt and result.task_id in prompt  # the episode's transcript, rendered
    # one store: the policy's gateway sees the judge's session, and the trainer's backlog leaves it out
    assert _get(scripted_gateway, f"/sessions/{result.judge_session_id}", admin_key)["outcome"]["kind"] == "judge"
    assert backlog == [f"judged/{result.task_id}"]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_a_judge_that_gives_no_verdict_makes_the_episode_an_infra_error_with_no_reward(
    alfworld_data: Path, scripted_gateway: str, judge_gateway: str, admin_key: str
):
    judges = {
        "unparsed": Judge("critic", _says("I cannot tell."), GatewayClient(judge_gateway, admin_key=admin_key)),
        "down": Judge("critic", _says("SCORE: 5"), GatewayClient(f"http://127.0.0.1:{_closed_port()}", admin_key=None)),
        "slow": Judge("critic", _says("SCORE: 5", timeout_s=0.001), GatewayClient(judge_gateway, admin_key=admin_key)),
    }
    results, _ = await _judged(alfworld_data, scripted_gateway, admin_key, judges)
    why = {"unparsed": "no verdict matching", "down": "unreachable", "slow": "no verdict within its 0.001s timeout"}
    for run_id, result in results.items():
        assert result.status == "infra_error" and why[run_id] in result.error, result
        episode = _get(scripted_gateway, f"/sessions/{result.session_id}", admin_key)
        assert episode["rewards"] == [] and episode["outcome"]["status"] == "infra_error"
        assert episode["outcome"]["reward"] is None and why[run_id] in episode["outcome"]["reason"]  # not a 0
    assert "I cannot tell." in results["unparsed"].error
    mine = _get(judge_gateway, f"/sessions/{results['unparsed'].judge_session_id}", admin_key)["outcome"]
    assert (mine["status"], mine["kind"]) == ("infra_error", "judge") and "no verdict" in mine["reason"]


def test_the_rubric_maps_its_scale_onto_rewards_and_refuses_verdicts_off_it():
    rubric = Rubric(scale=(1, 5))
    assert rubric.read("fine\nSCORE: 2\nno, SCORE: 4") == (4.0, 0.75)  # the last verdict counts
    with pytest.raises(JudgeError, match=r"off its scale \[1, 5\]"):
        rubric.read("SCORE: 7")
    assert Rubric(mode="add", weight=0.5).combine(1.0, 0.6) == 1.3
    assert Rubric(mode="add").combine(None, 0.6) == 0.6
    with pytest.raises(ValidationError, match="names a field it cannot have"):
        Rubric(prompt="Judge {episode}")
    with pytest.raises(ValidationError, match="needs a group around the score"):
        Rubric(pattern="SCORE: [0-9]+")
