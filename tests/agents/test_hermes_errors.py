"""hermes-agent refused by the gateway (its first prompt past the window): the eval result says
why, with the gateway's own message, and hermes-agent's temporary home does not outlive the eval."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from roost.agents.evaluate import EvalConfig, evaluate
from roost.rollout.gateway.config import GatewayConfig
from roost.rollout.gateway.launch import GatewayThread

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("run_agent") is None,
    reason="hermes-agent is not installed (pip install --no-deps hermes-agent==0.19.0)",
)


async def test_a_context_length_refusal_reaches_the_eval_result_and_no_temp_home_is_left(
    scripted_engine_url: str, tmp_path: Path, monkeypatch
):
    temp = tmp_path / "tmp"  # the env worker's TMPDIR, where hermes-agent's home is made
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    # hermes-agent's first prompt (system prompt, tool schemas) is ~4K tokens
    config = GatewayConfig(
        engine_url=scripted_engine_url, model="tiny", store_path=tmp_path / "t.sqlite", port=0, context_length=2048
    )
    server = GatewayThread(config)
    with server as gateway:
        report = await evaluate(
            EvalConfig(
                env="hermes",
                agent="hermes",
                base_url=gateway,
                admin_key=server.admin_key,
                model="tiny",
                split="test",
                episodes=1,
                workers=1,
                concurrency=1,
                max_turns=4,
                env_kwargs={"sandbox": {"backend": "local"}},
                progress=False,
            )
        )
    [result] = report["results"]
    assert (result["status"], result["stop_reason"], result["reward"]) == ("ok", "context_length", 0.0), result
    assert "the model's context length is 2048" in result["error"], result["error"]
    assert list(temp.glob("roost-hermes-home-*")) == []
