"""mini-swe-agent's own loop through the gateway in the SWE env: reward and token-exact records.

The scripted engine plays the model: it answers the task with a bash tool call that edits the
code, and the command's output with mini-swe-agent's submit command.
"""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from roost.agents.harness_check import harness_rig, token_exact_problems
from roost.agents.mini_swe import MiniSweAgent
from roost.agents.runner import RunConfig, run_episode
from roost.envs.swe.fixtures import make_fixtures
from roost.rollout.gateway.control.client import GatewayClient
from roost.rollout.keys import bearer

pytestmark = pytest.mark.slow

FIX = "sed -i 's/(len(values) - 1)/len(values)/' calc/stats.py && echo ROOST-EDIT-DONE"
WRONG = "sed -i 's/(len(values) - 1)/(len(values) + 1)/' calc/stats.py && echo ROOST-EDIT-DONE"


def tool_call(command: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": "bash", "arguments": {"command": command}}) + "\n</tool_call>"


def rules(edit: str) -> dict:
    return {
        "rules": [
            {"match": None, "reply": tool_call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")},
            {"match": "<pr_description>", "reply": "THOUGHT: mean divides by n - 1.\n\n" + tool_call(edit)},
            {"match": "ROOST-EDIT-DONE", "reply": tool_call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")},
        ]
    }


@pytest.fixture(scope="module")
def fixtures_dir(tmp_path_factory):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    folder = tmp_path_factory.mktemp("swe") / "fixtures"
    make_fixtures(folder)
    return folder


def script(engine, rules: dict) -> None:
    """Replace the scripted engine's rules (a control route: it takes the engine's key)."""
    httpx.post(f"{engine.url}/roost/scripted_sampler", json=rules, headers=bearer(engine.api_key)).raise_for_status()


@pytest.fixture
async def rig(scripted_engine, fixtures_dir, tmp_path):
    kwargs = {"fixtures_dir": str(fixtures_dir), "sandbox": {"backend": "bubblewrap"}}
    async with harness_rig(scripted_engine.url, "swe", kwargs, tmp_path / "trajectories.sqlite") as rig:
        yield rig
    script(scripted_engine, {"rules": [{"match": None, "reply": "OK."}]})


@pytest.mark.parametrize("edit,reward", [(FIX, 1.0), (WRONG, 0.0)], ids=["right-patch", "wrong-patch"])
async def test_mini_swe_agent_solves_and_is_recorded_token_exact(rig, scripted_engine, edit, reward):
    script(scripted_engine, rules(edit))
    task = next(t for t in await rig.host.tasks("test") if t.id == "roost-fixtures__calc-1")
    async with GatewayClient(rig.gateway_url, admin_key=rig.admin_key) as gateway:
        result = await run_episode(
            task,
            rig.host,
            MiniSweAgent(),
            rig.host.info.tools,
            RunConfig(max_turns=6, model="tiny", progress=False),
            gateway,
        )
    assert result.status == "ok", result.error
    assert result.reward == reward and result.steps == 2 and result.stop_reason == "done"
    assert token_exact_problems(rig.store_path, result.session_id, rig.recorder) == []
    from roost.rollout.store.reader import TrajectoryReader

    with TrajectoryReader(rig.store_path) as reader:
        calls = reader.calls(result.session_id)
        assert [c.kind for c in calls] == ["root", "extend"]
        assert [r.reward for r in reader.rewards(result.session_id)] == [reward]


async def test_a_dead_model_endpoint_is_an_infra_error(rig):
    task = (await rig.host.tasks("test"))[0]
    result = await run_episode(
        task,
        rig.host,
        MiniSweAgent(),
        rig.host.info.tools,
        RunConfig(max_turns=3, model="tiny", base_url="http://127.0.0.1:9/v1", progress=False),
    )
    assert result.status == "infra_error" and "model endpoint" in result.error
