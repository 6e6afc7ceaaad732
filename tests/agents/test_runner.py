"""The episode runner with the expert agent: in-process and against a server, faults, capacity."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from roost.agents.evaluate import EvalConfig, evaluate
from roost.agents.expert import ExpertAgent
from roost.agents.runner import RunConfig, run_episodes, summarize
from roost.agents.tool_agent import ToolAgent
from roost.envs.client import EnvClient
from roost.envs.episodes import EpisodeManager, ManagerConfig
from roost.envs.serve import ServerConfig, serving
from roost.envs.worker import WorkerConfig
from roost.rollout.gateway.control.client import GatewayClient
from roost.rollout.keys import bearer
from roost.tests.agents.conftest import start_gateway
from roost.tests.prometheus_samples import sample
from roost.trainer.advantages import Group
from roost.trainer.sample_sources import samples_from_store


@pytest.mark.slow
async def test_the_expert_solves_every_fixture_game_in_process(alfworld_data: Path):
    report = await evaluate(
        EvalConfig(
            "alfworld",
            agent="expert",
            episodes=6,
            split="train",
            concurrency=3,
            env_kwargs={"data_dir": str(alfworld_data)},
            workers=2,
            progress=False,
        )
    )
    assert (report["success_rate"], report["mean_reward"], report["scored"]) == (1.0, 1.0, 6)
    assert len({r["task_id"] for r in report["results"]}) == 6 and not report["recorded"]


@pytest.mark.slow
async def test_the_expert_solves_every_fixture_game_against_a_full_server(alfworld_data: Path):
    # One slot for four concurrent episodes: the runner waits out the 429s.
    config = ServerConfig(
        "alfworld", {"data_dir": str(alfworld_data)}, port=0, manager=ManagerConfig(workers=1, max_episodes=1)
    )
    async with serving(config) as url:
        report = await evaluate(
            EvalConfig(
                "alfworld", agent="expert", env_url=url, episodes=6, split="valid_unseen", concurrency=4, progress=False
            )
        )
        async with httpx.AsyncClient() as http:  # the server shares this event loop: no blocking calls
            metrics = (await http.get(f"{url}/metrics")).text
    assert (report["success_rate"], report["scored"], report["infra_errors"]) == (1.0, 6, 0)
    assert sample(metrics, "roost_env_capacity_rejections_total") > 0


async def test_env_faults_are_infra_errors_never_scored_and_reach_the_gateway(scripted_gateway: str, admin_key: str):
    manager = EpisodeManager(WorkerConfig("roost.tests.agents.faulty_envs:make_factory", {}), ManagerConfig(workers=1))
    async with manager, GatewayClient(scripted_gateway, admin_key=admin_key) as gateway:
        tasks = await manager.tasks("train")
        run = RunConfig(concurrency=1, run_id="faults", progress=False)
        results = await run_episodes(tasks, manager, ExpertAgent(), manager.info.tools, run, gateway)
    assert [r.status for r in results] == ["infra_error", "infra_error"]
    assert "died" in results[0].error
    summary = summarize(results)
    assert (summary["scored"], summary["success_rate"], summary["infra_errors"]) == (0, None, 2)
    session = httpx.get(f"{scripted_gateway}/sessions/{results[0].session_id}", headers=bearer(admin_key)).json()
    assert session["group_id"] == "faults/t0" and session["status"] == "finished"
    assert session["outcome"]["status"] == "infra_error" and session["rewards"] == []
    assert session["outcome"]["reward"] is None and "died" in session["outcome"]["reason"]  # no reward, not a 0


async def test_with_a_gateway_each_episode_gets_a_session_with_its_reward(
    alfworld_data: Path, scripted_gateway: str, admin_key: str
):
    config = ServerConfig("alfworld", {"data_dir": str(alfworld_data)}, port=0, manager=ManagerConfig(workers=1))
    gateway = GatewayClient(scripted_gateway, admin_key=admin_key)
    async with serving(config) as url, EnvClient(url) as client, gateway:
        tasks = (await client.tasks("valid_seen"))[:2]
        run = RunConfig(concurrency=2, run_id="rewarded", progress=False)
        results = await run_episodes(tasks, client, ExpertAgent(), (await client.info()).tools, run, gateway)
    assert all(r.status == "ok" and r.success for r in results)
    listed = httpx.get(f"{scripted_gateway}/sessions", headers=bearer(admin_key)).json()["sessions"]
    assert {s["group_id"] for s in listed} == {f"rewarded/{t.id}" for t in tasks}
    session = httpx.get(f"{scripted_gateway}/sessions/{results[0].session_id}", headers=bearer(admin_key)).json()
    assert session["rewards"][0]["reward"] == 1.0 and session["outcome"]["status"] == "ok"
    assert session["task"]["id"] == results[0].task_id


class Fumbler:
    """Tries two commands no game admits, then gives up."""

    name, needs_model, reset_options = "fumbler", False, {}

    async def run(self, ctx):
        from roost.agents.protocol import AgentOutcome
        from roost.envs.errors import InvalidActionError
        from roost.envs.protocol import TextAction

        invalid = 0
        for command in ("dance", "fly to the moon"):
            try:
                await ctx.step(TextAction(command))
            except InvalidActionError:
                invalid += 1
        return AgentOutcome(turns=2, invalid_actions=invalid, stop_reason="gave_up")


async def test_the_invalid_action_penalty_shapes_the_training_reward_only(
    alfworld_data: Path, scripted_gateway: str, admin_key: str
):
    manager = EpisodeManager(WorkerConfig("alfworld", {"data_dir": str(alfworld_data)}), ManagerConfig(workers=1))
    async with manager, GatewayClient(scripted_gateway, admin_key=admin_key) as gateway:
        tasks = (await manager.tasks("train"))[:1]
        run = RunConfig(concurrency=1, run_id="penalised", progress=False, invalid_action_penalty=0.25)
        [result] = await run_episodes(tasks, manager, Fumbler(), manager.info.tools, run, gateway)
    assert (result.status, result.reward, result.invalid_actions, result.success) == ("ok", 0.0, 2, False)
    session = httpx.get(f"{scripted_gateway}/sessions/{result.session_id}", headers=bearer(admin_key)).json()
    [posted] = session["rewards"]
    assert posted["reward"] == -0.5 and posted["info"]["env_reward"] == 0.0 and posted["info"]["invalid_actions"] == 2
    assert session["outcome"]["reward"] == 0.0


async def test_the_tool_agent_s_invalid_actions_are_penalised_on_the_calls_that_chose_them(
    alfworld_data: Path, scripted_gateway: str, admin_key: str, tmp_path: Path
):
    # The scripted engine's fallback reply "OK." is not a command: every turn is an invalid action.
    manager = EpisodeManager(WorkerConfig("alfworld", {"data_dir": str(alfworld_data)}), ManagerConfig(workers=1))
    async with manager, GatewayClient(scripted_gateway, admin_key=admin_key) as gateway:
        tasks = (await manager.tasks("train"))[:1]
        run = RunConfig(concurrency=1, max_turns=2, run_id="stepwise", progress=False, invalid_action_penalty=0.25)
        [result] = await run_episodes(tasks, manager, ToolAgent(max_tokens=8), [], run, gateway)
    assert (result.status, result.turns, result.invalid_actions, result.reward) == ("ok", 2, 2, 0.0)
    session = httpx.get(f"{scripted_gateway}/sessions/{result.session_id}", headers=bearer(admin_key)).json()
    call_ids = [c["call_id"] for c in session["calls"]]
    assert {r["call_id"]: r["reward"] for r in session["rewards"] if r["call_id"]} == dict.fromkeys(call_ids, -0.25)
    assert [r["reward"] for r in session["rewards"] if r["call_id"] is None] == [0.0]
    [sample] = samples_from_store(tmp_path / "trajectories.sqlite", session_ids=[result.session_id])
    assert (sample.reward, [c.reward for c in sample.calls]) == (0.0, [-0.25, -0.25])
    assert Group("g", [sample]).agent_rewards() == {(result.session_id, sample.agent_id): -0.5}


class Stuck:
    """Waits on something that never comes; `own_timeout` makes it time out by itself first."""

    name, needs_model, reset_options = "stuck", False, {}

    def __init__(self, own_timeout: float | None = None) -> None:
        self.own_timeout = own_timeout

    async def run(self, ctx):
        import asyncio

        await asyncio.wait_for(asyncio.Event().wait(), self.own_timeout)


async def test_the_runner_cuts_off_a_hung_harness_in_eval_and_training_alike(
    alfworld_data: Path, scripted_gateway: str, admin_key: str
):
    manager = EpisodeManager(WorkerConfig("alfworld", {"data_dir": str(alfworld_data)}), ManagerConfig(workers=1))
    async with manager, GatewayClient(scripted_gateway, admin_key=admin_key) as gateway:
        tasks = (await manager.tasks("train"))[:1]
        for kind in ("eval", "train"):
            run = RunConfig(concurrency=1, run_id=f"hung-{kind}", kind=kind, timeout_s=0.5, progress=False)
            [result] = await run_episodes(tasks, manager, Stuck(), manager.info.tools, run, gateway)
            assert result.status == "timeout" and "ran past its 0s timeout" in result.error, result
            session = httpx.get(f"{scripted_gateway}/sessions/{result.session_id}", headers=bearer(admin_key)).json()
            assert session["outcome"] == {
                "status": "timeout",
                "reward": None,
                "reward_source": "none",
                "kind": kind,
                "reason": result.error,
            }
        # the harness's own timeout is its error, not the episode's
        run = RunConfig(concurrency=1, run_id="own", timeout_s=30.0, progress=False)
        [result] = await run_episodes(tasks, manager, Stuck(own_timeout=0.1), manager.info.tools, run, gateway)
    assert result.status == "agent_error" and result.error.startswith("TimeoutError")


def _most_at_once(sessions: list[dict]) -> int:
    """The most sessions open at one moment (from their created and finished times)."""
    events = sorted([(s["created_at"], 1) for s in sessions] + [(s["finished_at"], -1) for s in sessions])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


async def test_following_admission_the_runner_opens_only_the_episodes_the_gateway_has_room_for(
    alfworld_data: Path, scripted_engine_url: str, tmp_path: Path, admin_key: str
):
    manager = EpisodeManager(WorkerConfig("alfworld", {"data_dir": str(alfworld_data)}), ManagerConfig(workers=1))
    store = tmp_path / "trajectories.sqlite"
    with start_gateway(scripted_engine_url, store, admin_key, admission_programs=1) as url:
        async with manager, GatewayClient(url, admin_key=admin_key) as gateway:
            tasks = (await manager.tasks("train"))[:1] * 4
            opened = {}
            for follow in (False, True):
                run = RunConfig(
                    concurrency=4, follow_admission=follow, max_turns=2, run_id=f"f{follow}", progress=False
                )
                results = await run_episodes(tasks, manager, ToolAgent(max_tokens=8), [], run, gateway)
                assert [r.status for r in results] == ["ok"] * 4
                listed = httpx.get(f"{url}/sessions", headers=bearer(admin_key)).json()["sessions"]
                mine = [s for s in listed if s["group_id"].startswith(f"f{follow}/")]
                opened[follow] = _most_at_once(mine)
    # one program at a time at the gateway: all four wait there without following it; following
    # it, one runs and one more is ready
    assert opened == {False: 4, True: 2}
