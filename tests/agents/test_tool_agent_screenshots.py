"""The tool agent with `screenshots`: each observation's PNG goes to the model with its text as
an `image_url` part, every earlier one kept (so each request extends the last); through a real
gateway's pass-through to a vision model's server (a stand-in that keeps the bodies), which
records each call with its images."""

from __future__ import annotations

import pytest

from roost.agents.evaluate import EvalConfig, play
from roost.tests.agents.screen_envs import screen
from roost.tests.rollout.gateway_helpers import start_gateway, stored_calls
from roost.tests.rollout.test_gateway_images import VisionUpstream


@pytest.fixture
def vision_gateway(tmp_path):
    upstream = VisionUpstream()
    server = start_gateway(upstream.url, tmp_path / "t.sqlite", backend="openai", model=None)
    try:
        yield server, upstream, tmp_path / "t.sqlite"
    finally:
        server.stop()
        upstream.shutdown()


def config(server, screenshots: bool) -> EvalConfig:
    return EvalConfig(
        "roost.tests.agents.screen_envs:make_factory",
        agent="tool",
        agent_kwargs={"screenshots": screenshots},
        base_url=server.url,
        admin_key=server.admin_key,
        model="vision",
        episodes=1,
        max_turns=2,
        progress=False,
    )


def image_urls(messages: list[dict]) -> list[str]:
    return [
        part["image_url"]["url"]
        for m in messages
        if isinstance(m["content"], list)
        for part in m["content"]
        if part["type"] == "image_url"
    ]


async def test_each_screenshot_reaches_the_model_and_the_record(vision_gateway):
    server, upstream, store = vision_gateway
    [result] = (await play(config(server, screenshots=True))).results
    assert result.status == "ok" and result.steps == 2, result.error
    first, second = (body["messages"] for body in upstream.bodies)
    shots = [f"data:image/png;base64,{screen(step)}" for step in range(2)]
    assert first[1]["content"][0] == {"type": "text", "text": "Task: describe the screen"}
    assert image_urls(first) == shots[:1] and image_urls(second) == shots
    assert second[: len(first)] == first  # the second request extends the first
    calls = stored_calls(store, result.session_id)
    assert [image_urls(c.request["messages"]) for c in calls] == [shots[:1], shots]


async def test_without_screenshots_the_model_gets_text_only(vision_gateway):
    server, upstream, _ = vision_gateway
    [result] = (await play(config(server, screenshots=False))).results
    assert result.status == "ok", result.error
    assert all(isinstance(m["content"], str) for body in upstream.bodies for m in body["messages"])
