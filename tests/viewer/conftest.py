"""Fixtures of the viewer tests: a run folder whose store a real gateway wrote, and a real viewer.

The run: group `g-weather` of two episodes on the scripted engine. The first calls a tool,
answers, then retries its first turn with edited history (a fork); it gets a per-call reward, a
session reward and advantages. The second answers once and gets reward 0. Beside the store:
metrics.jsonl (written by the trainer's MetricsLogger, plus a truncated last line), evals.json.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest
import uvicorn

from roost.rollout.keys import bearer
from roost.serving.thread import UvicornThread
from roost.tests.rollout.gateway_helpers import TOOL_CALL, WEATHER_TOOLS, new_session, say, start_gateway
from roost.trainer.checkpoint import save_evals
from roost.trainer.metrics import MetricsLogger
from roost.trainer.recipe import MetricsConfig
from roost.viewer.app import ViewerConfig, build_app

GROUP = "g-weather"


def chat(session: dict, messages: list[dict], reply: str, **kwargs):
    client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"], max_retries=0)
    return client.chat.completions.create(model="tiny", messages=messages, extra_body=say(reply), **kwargs)


def play_group(server) -> dict[str, str]:
    """Two episodes of one group through the gateway; returns their session ids and the fork's call id."""
    admin = bearer(server.admin_key)
    first = new_session(server, group_id=GROUP, task={"task_id": "weather-paris"})
    convo = [{"role": "user", "content": "What is the weather in Paris?"}]
    call = chat(first, convo, TOOL_CALL, tools=WEATHER_TOOLS).choices[0].message
    convo += [
        call.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.tool_calls[0].id, "content": "Sunny, 24 C."},
    ]
    chat(first, convo, "It is sunny in Paris.", tools=WEATHER_TOOLS)
    edited = [convo[0], {"role": "assistant", "content": "Let me think."}, {"role": "user", "content": "Well?"}]
    chat(first, edited, "Sunny.", tools=WEATHER_TOOLS)
    sid = first["session_id"]
    calls = httpx.get(f"{server.url}/sessions/{sid}", headers=admin).json()["calls"]
    ids = [c["call_id"] for c in calls]
    answer_len = calls[1]["completion_tokens"]

    def post(path: str, body: dict) -> None:
        httpx.post(f"{server.url}/sessions/{sid}/{path}", json=body, headers=admin).raise_for_status()

    post("reward", {"reward": 0.25, "call_id": ids[1], "info": {"turn": 2}})
    post("reward", {"reward": 1.0})
    post(
        "advantages",
        {
            "advantages": [
                {"call_id": ids[0], "advantage": 0.5},
                {"call_id": ids[1], "advantage": [0.9] * 3 + [-0.9] * (answer_len - 3)},
            ]
        },
    )
    post("finish", {"info": {"status": "ok"}})
    second = new_session(server, group_id=GROUP, task={"task_id": "weather-paris"})
    chat(second, [{"role": "user", "content": "What is the weather in Paris?"}], "I do not know.")
    httpx.post(
        f"{server.url}/sessions/{second['session_id']}/reward", json={"reward": 0.0}, headers=admin
    ).raise_for_status()
    return {"first": sid, "second": second["session_id"], "tool_call": ids[0], "answer": ids[1], "fork": ids[2]}


@pytest.fixture(scope="session")
def run_dir(scripted_engine_url, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    run = tmp_path_factory.mktemp("run")
    server = start_gateway(scripted_engine_url, run / "trajectories.sqlite")
    try:
        played = play_group(server)
    finally:
        server.stop()
    logger = MetricsLogger(MetricsConfig(console=False), run)
    for step in range(3):
        logger.log(
            step,
            {
                "reward": 0.2 * step,
                "success": 0.3 + 0.1 * step,
                "kl": 0.01 * step,
                "entropy": 1.5,
                "clip_fraction": 0.02,
                "invalid_actions": 1.0,
                "rollout_tokens_per_s": 900.0,
                "rollout_s": 2.0,
                "train_s": 1.0,
            },
        )
    logger.close()
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"stage": "rl", "step": 3, "rew')  # a run killed mid-write
    save_evals(
        run,
        {
            "before": {
                "split": "valid_unseen",
                "episodes": 4,
                "scored": 4,
                "success_rate": 0.25,
                "mean_reward": 0.25,
                "left_out": {},
                "groups": "eval-before-*",
            }
        },
    )
    return run, played


def viewer_server(config: ViewerConfig) -> UvicornThread:
    """A real viewer (uvicorn) on 127.0.0.1 in a background thread."""
    return UvicornThread(uvicorn.Config(build_app(config), log_level="warning"), "the viewer")


@pytest.fixture(scope="session")
def viewer(run_dir) -> tuple[str, dict[str, str]]:
    run, played = run_dir
    with viewer_server(ViewerConfig(run_dir=run)) as url:
        yield url, played
