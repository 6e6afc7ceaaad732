"""The tool-calling agent through the real gateway: a scripted model that plays the walkthrough
(the whole tool-call loop, recorded token-exactly), and the tiny model sampling freely."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from roost.agents.evaluate import EvalConfig, evaluate
from roost.envs.alfworld.env import make_factory
from roost.envs.protocol import TextAction
from roost.rollout.keys import bearer
from roost.rollout.store.reader import TrajectoryReader


def _tool_call(command: str) -> str:
    return f"<tool_call>\n{json.dumps({'name': 'act', 'arguments': {'command': command}})}\n</tool_call>"


async def _walkthrough_rules(data: Path, split: str) -> tuple[str, list[dict]]:
    """Scripted-sampler rules that answer each observation of an expert game with the next command.

    The newest message decides which rule fires, so each observation's first line is its key."""
    env = make_factory(str(data))()
    try:
        for task in await env.tasks(split):
            reset = await env.reset(task_id=task.id, options={"expert_plan": True})
            keys, info, text = [], reset.info, reset.observation.text
            rules = []
            while True:
                key = text.split("\n\n")[0].split("\n")[-1] if not keys else text.split("\n")[0]
                keys.append(key)
                command = info["expert_plan"][0]
                rules.append({"match": re.escape(key), "reply": _tool_call(command)})
                step = await env.step(TextAction(command))
                if step.done:
                    break
                info, text = step.info, step.observation.text
            if len(set(keys)) == len(keys):
                return task.id, rules
    finally:
        await env.close()
    raise AssertionError("no fixture game with distinct observations")


async def test_a_scripted_model_wins_through_tool_calls_and_the_gateway_records_it(
    alfworld_data: Path, scripted_engine, scripted_gateway: str, admin_key: str
):
    task_id, rules = await _walkthrough_rules(alfworld_data, "valid_seen")
    rules.append({"match": None, "reply": "OK."})
    scripted_engine_url = scripted_engine.url
    async with httpx.AsyncClient(headers=bearer(scripted_engine.api_key)) as http:
        scripted = await http.post(f"{scripted_engine_url}/roost/scripted_sampler", json={"rules": rules})
        assert scripted.status_code == 200
        try:
            report = await evaluate(
                EvalConfig(
                    "alfworld",
                    agent="tool",
                    base_url=scripted_gateway,
                    episodes=1,
                    admin_key=admin_key,
                    task_ids=(task_id,),
                    split="valid_seen",
                    concurrency=1,
                    max_turns=12,
                    progress=False,
                    env_kwargs={"data_dir": str(alfworld_data)},
                    workers=1,
                    agent_kwargs={"max_tokens": 64},
                    run_id="scripted",
                )
            )
        finally:
            await http.post(
                f"{scripted_engine_url}/roost/scripted_sampler", json={"rules": [{"match": None, "reply": "OK."}]}
            )
    (result,) = report["results"]
    assert result["task_id"] == task_id
    assert report["recorded"] and result["status"] == "ok"
    assert (result["success"], result["reward"], result["invalid_actions"]) == (True, 1.0, 0)
    session = httpx.get(f"{scripted_gateway}/sessions/{result['session_id']}", headers=bearer(admin_key)).json()
    calls = session["calls"]
    assert len(calls) == result["turns"] == result["steps"] == len(rules) - 1
    assert [c["kind"] for c in calls] == ["root"] + ["extend"] * (len(calls) - 1)
    assert session["rewards"][0]["reward"] == 1.0 and session["outcome"]["status"] == "ok"


async def test_the_tiny_model_plays_through_the_gateway_and_is_recorded(
    alfworld_data: Path, model_gateway: str, admin_key: str
):
    report = await evaluate(
        EvalConfig(
            "alfworld",
            agent="tool",
            base_url=model_gateway,
            admin_key=admin_key,
            episodes=2,
            split="valid_unseen",
            concurrency=2,
            max_turns=2,
            progress=False,
            env_kwargs={"data_dir": str(alfworld_data)},
            workers=1,
            agent_kwargs={"max_tokens": 16},
        )
    )
    assert report["recorded"] and report["scored"] == 2 and report["infra_errors"] == 0
    for result in report["results"]:
        session = httpx.get(
            f"{model_gateway}/sessions/{result['session_id']}?tokens=1", headers=bearer(admin_key)
        ).json()
        assert len(session["calls"]) == 2 and session["outcome"]["status"] == "ok"
        assert all(c["completion_tokens"] > 0 and c["sampled_ids"] for c in session["calls"])
        assert session["calls"][1]["kind"] == "extend"


async def test_a_plain_openai_endpoint_is_evaluated_without_recording(alfworld_data: Path, scripted_gateway: str):
    # The gateway's sessionless /v1 stands in for any OpenAI-compatible API here; the scripted
    # engine's fallback reply "OK." is not a command, so each turn is an invalid action.
    report = await evaluate(
        EvalConfig(
            "alfworld",
            agent="tool",
            base_url=f"{scripted_gateway}/v1",
            episodes=1,
            split="train",
            max_turns=2,
            progress=False,
            workers=1,
            env_kwargs={"data_dir": str(alfworld_data)},
        )
    )
    (result,) = report["results"]
    assert not report["recorded"] and result["session_id"] is None
    assert (result["status"], result["success"], result["invalid_actions"], result["stop_reason"]) == (
        "ok",
        False,
        2,
        "max_turns",
    )


async def test_a_gateway_without_its_admin_key_is_refused_not_run_unrecorded(
    alfworld_data: Path, scripted_gateway: str
):
    config = EvalConfig(
        "alfworld",
        agent="tool",
        base_url=scripted_gateway,
        episodes=1,
        progress=False,
        workers=1,
        env_kwargs={"data_dir": str(alfworld_data)},
    )
    with pytest.raises(ValueError, match="admin key .*ROOST_ADMIN_KEY.*/v1 to run them unrecorded"):
        await evaluate(config)


async def test_a_sampling_seed_replays_an_episode_and_another_seed_does_not(
    alfworld_data: Path, model_gateway: str, admin_key: str
):
    # The tiny model's weights are random: at temperature 1 two unseeded episodes share nothing.
    async def sampled(seed: int) -> list[list[list[int]]]:
        report = await evaluate(
            EvalConfig(
                "alfworld",
                agent="tool",
                base_url=model_gateway,
                admin_key=admin_key,
                episodes=2,
                split="valid_unseen",
                concurrency=2,
                max_turns=2,
                progress=False,
                env_kwargs={"data_dir": str(alfworld_data)},
                workers=1,
                agent_kwargs={"max_tokens": 8, "temperature": 1.0, "seed": seed},
            )
        )
        sessions = [
            httpx.get(f"{model_gateway}/sessions/{r['session_id']}?tokens=1", headers=bearer(admin_key)).json()
            for r in sorted(report["results"], key=lambda r: r["task_id"])
        ]
        return [[c["sampled_ids"] for c in s["calls"]] for s in sessions]

    first, again, other = await sampled(3), await sampled(3), await sampled(4)
    assert first == again
    assert first[0][0] != first[1][0]  # the seed depends on the task
    assert all(a[0] != b[0] for a, b in zip(first, other))


def _listed_commands(observation: str) -> list[str]:
    """The commands an ALFWorld observation lists after "Admissible commands:"."""
    return [line[2:] for line in observation.split("Admissible commands:\n")[1].split("\n")]


async def test_allowed_replies_from_holds_every_reply_to_the_envs_commands(
    alfworld_data: Path, model_gateway: str, admin_key: str, tmp_path: Path
):
    # The tiny model's weights are random: free, it never spells a command (every turn invalid);
    # held to the env's admissible commands, it only ever plays one, at reset and after each step.
    report = await evaluate(
        EvalConfig(
            "alfworld",
            agent="tool",
            base_url=model_gateway,
            admin_key=admin_key,
            episodes=4,
            split="valid_unseen",
            concurrency=4,
            max_turns=4,
            progress=False,
            env_kwargs={"data_dir": str(alfworld_data)},
            workers=1,
            agent_kwargs={"max_tokens": 64, "temperature": 1.0, "allowed_replies_from": "admissible_commands"},
        )
    )
    assert report["scored"] == 4 and report["infra_errors"] == 0
    replies = set()
    for result in report["results"]:
        assert (result["status"], result["invalid_actions"]) == ("ok", 0)
        with TrajectoryReader(tmp_path / "trajectories.sqlite") as reader:
            calls = reader.calls(result["session_id"])
        assert len(calls) == result["turns"] == result["steps"]
        for call in calls:
            commands = _listed_commands(call.request["messages"][-1]["content"])
            assert call.response["message"]["content"] in commands
            assert call.response["constraint"] == {"source": "allowed_replies", "type": "regex"}
            replies.add(call.response["message"]["content"])
    assert len(replies) > 1  # sampled, not one fixed command


async def test_allowed_replies_from_a_key_the_env_does_not_fill_is_an_agent_error(
    alfworld_data: Path, model_gateway: str, admin_key: str
):
    report = await evaluate(
        EvalConfig(
            "alfworld",
            agent="tool",
            base_url=model_gateway,
            admin_key=admin_key,
            episodes=1,
            split="valid_unseen",
            max_turns=2,
            progress=False,
            workers=1,
            env_kwargs={"data_dir": str(alfworld_data)},
            agent_kwargs={"allowed_replies_from": "commands"},
        )
    )
    (result,) = report["results"]
    assert result["status"] == "agent_error"
    assert "allowed_replies_from='commands'" in result["error"] and "admissible_commands" in result["error"]
