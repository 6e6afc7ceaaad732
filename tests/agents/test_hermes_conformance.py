"""hermes-agent's own loop, hosted by the Hermes env, through the gateway: reward and token-exact records.

The scripted engine plays the model and emits hermes-agent's own tool calls (read_file, patch,
terminal); hermes-agent runs them in the episode's bubblewrap sandbox, and the task's verifier
decides the reward. The engine gets a 16K window: hermes-agent's system prompt and the schemas
of its terminal and file tools are ~4K tokens, the tiny model's default window.
"""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from roost.agents.harness_check import harness_rig, token_exact_problems
from roost.agents.hermes import HermesAgent
from roost.agents.runner import RunConfig, run_episode
from roost.rollout.engine.launch import EngineProcess
from roost.rollout.gateway.control.client import GatewayClient
from roost.rollout.keys import bearer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("run_agent") is None,
        reason="hermes-agent is not installed (pip install --no-deps hermes-agent==0.19.0)",
    ),
]


def tool_call(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def rules(new: str) -> dict:
    """Read calc.py, patch `a - b` into `new`, run it, then answer."""
    check = 'echo RESULT=$(python3 -c "from calc import add; print(add(2, 3))")'
    return {
        "rules": [
            {"match": None, "reply": "I could not finish."},
            {"match": "Fix it so that add", "reply": tool_call("read_file", {"path": "calc.py"})},
            {
                "match": r"2\|    return a - b",
                "reply": tool_call("patch", {"path": "calc.py", "old_string": "a - b", "new_string": new}),
            },
            {"match": '"success": true', "reply": tool_call("terminal", {"command": check})},
            {"match": "RESULT=", "reply": "Fixed: add now computes " + new + "."},
        ]
    }


@pytest.fixture(scope="module")
def hermes_engine(tiny_model_path, tmp_path_factory):
    script = tmp_path_factory.mktemp("hermes-script") / "script.json"
    script.write_text(json.dumps({"rules": [{"match": None, "reply": "OK."}]}))
    process = EngineProcess("tiny", scripted=True, script=script, extra_args=["--context-length", "16384"])
    with process:
        yield process


def script(engine: EngineProcess, rules: dict) -> None:
    """Replace the scripted engine's rules (a control route: it takes the engine's key)."""
    httpx.post(f"{engine.url}/roost/scripted_sampler", json=rules, headers=bearer(engine.api_key)).raise_for_status()


@pytest.fixture
async def rig(hermes_engine, tmp_path):
    kwargs = {"sandbox": {"backend": "bubblewrap"}, "hermes_home": str(tmp_path / "hermes-home")}
    async with harness_rig(hermes_engine.url, "hermes", kwargs, tmp_path / "trajectories.sqlite") as rig:
        yield rig


@pytest.mark.parametrize("new,reward", [("a + b", 1.0), ("a * b", 0.0)], ids=["right-fix", "wrong-fix"])
async def test_hermes_agent_completes_a_task_and_is_recorded_token_exact(rig, hermes_engine, new, reward):
    script(hermes_engine, rules(new))
    task = next(t for t in await rig.host.tasks("train") if t.id == "fix-add")
    async with GatewayClient(rig.gateway_url, admin_key=rig.admin_key) as gateway:
        result = await run_episode(
            task,
            rig.host,
            HermesAgent(wait_s=5),
            rig.host.info.tools,
            RunConfig(max_turns=8, model="tiny", progress=False),
            gateway,
        )
    assert result.status == "ok", result.error
    assert result.reward == reward and result.stop_reason == "done" and result.turns == 4
    assert token_exact_problems(rig.store_path, result.session_id, rig.recorder) == []
    from roost.rollout.store.reader import TrajectoryReader

    with TrajectoryReader(rig.store_path) as reader:
        calls = reader.calls(result.session_id)
        # One growing conversation: each call extends the one before (no re-tokenized history).
        assert [c.kind for c in calls] == ["root", "extend", "extend", "extend"]
        assert [r.reward for r in reader.rewards(result.session_id)] == [reward]
        tools = [json.loads(c.response["message"]["tool_calls"][0]["function"]["arguments"]) for c in calls[:3]]
    assert tools[1] == {"path": "calc.py", "old_string": "a - b", "new_string": new}


async def test_hermes_agent_reaches_nothing_but_the_gateway(hermes_engine, tmp_path, monkeypatch):
    """In this process: no connection leaves 127.0.0.1 and nothing is written under $HOME."""
    import socket

    from roost.envs.hermes.env import make_factory
    from roost.envs.protocol import ToolCall
    from roost.rollout.gateway.config import GatewayConfig
    from roost.rollout.gateway.launch import GatewayThread

    attempts: list = []
    connect = socket.socket.connect

    def guarded(sock, address):
        host = address[0] if isinstance(address, tuple) else ""
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not (host.startswith("127.") or host == "::1"):
            attempts.append(address)
            raise OSError(f"roost test: no network beyond 127.0.0.1 ({address})")
        return connect(sock, address)

    script(hermes_engine, rules("a + b"))
    env = make_factory(sandbox={"backend": "bubblewrap"})()
    server = GatewayThread(
        GatewayConfig(engine_url=hermes_engine.url, model="tiny", store_path=tmp_path / "t.sqlite", port=0)
    )
    with server as gateway:
        home = tmp_path / "home"  # set once the gateway has loaded the tiny model (roost's own cache)
        home.mkdir()
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setattr(socket.socket, "connect", guarded)
        session = httpx.post(
            f"{gateway}/sessions", json={"group_id": "offline"}, headers=bearer(server.admin_key)
        ).json()
        await env.reset(task_id="fix-add")
        args = {"base_url": session["base_url"], "api_key": session["key"], "model": "tiny", "wait_s": 5}
        try:
            for _ in range(20):
                step = await env.step(ToolCall("run_agent", args))
                args = {"wait_s": 5}
                if step.done:
                    break
        finally:
            await env.close()
    assert step.reward == 1.0 and step.info["status"] == "finished", step.info
    assert step.info["tool_calls"] == ["read_file", "patch", "terminal"]
    assert attempts == [] and list(home.iterdir()) == []


async def test_roost_eval_plays_the_offline_test_split_through_the_gateway(hermes_engine, tmp_path):
    """`roost eval hermes`'s Python API, the engine scripted with each task's reference solution."""
    from roost.agents.evaluate import EvalConfig, evaluate
    from roost.envs.hermes.scripted import solution_rules
    from roost.envs.hermes.task import builtin_tasks_path, load_tasks
    from roost.rollout.gateway.config import GatewayConfig
    from roost.rollout.gateway.launch import GatewayThread

    script(hermes_engine, solution_rules(load_tasks(builtin_tasks_path())))
    server = GatewayThread(
        GatewayConfig(engine_url=hermes_engine.url, model="tiny", store_path=tmp_path / "t.sqlite", port=0)
    )
    with server as gateway:
        report = await evaluate(
            EvalConfig(
                env="hermes",
                agent="roost.agents.hermes:HermesAgent",
                base_url=gateway,
                admin_key=server.admin_key,
                model="tiny",
                split="test",
                episodes=3,
                concurrency=3,
                workers=1,
                env_kwargs={"sandbox": {"backend": "bubblewrap"}},
                progress=False,
            )
        )
    assert report["recorded"] and report["scored"] == 3 and report["success_rate"] == 1.0, report["results"]
    assert sorted(r["task_id"] for r in report["results"]) == ["fix-stats", "sort-unique", "word-count"]
