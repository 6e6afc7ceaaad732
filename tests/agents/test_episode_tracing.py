"""Tracing into a real OTLP receiver (Arize Phoenix): the runner's episode, the env server's
reset and step, the gateway's call and the engine's generation arrive as one trace, each span
under the one that caused it, and the stored call names its span; a trainer's weight sync
reaches into the engine the same way."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import httpx
import pytest

from roost.agents.runner import RunConfig, run_episodes
from roost.agents.tool_agent import ToolAgent
from roost.envs.client import EnvClient
from roost.envs.episodes import ManagerConfig
from roost.envs.serve import ServerConfig, serving
from roost.rollout.engine.launch import EngineProcess
from roost.rollout.gateway.config import GatewayConfig
from roost.rollout.gateway.control.client import GatewayClient
from roost.rollout.gateway.launch import GatewayThread
from roost.rollout.store.reader import TrajectoryReader
from roost.tests.phoenix import PhoenixServer, Span
from roost.tracing import Tracing
from roost.trainer.weight_sync import sync_weights

pytestmark = pytest.mark.slow  # Phoenix takes ~30 s to start


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory):
    with PhoenixServer(tmp_path_factory.mktemp("phoenix")) as server:
        yield server


@pytest.fixture(scope="module")
def traced_env(phoenix):
    """The standard variables turn tracing on in this process and the servers it starts."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", phoenix.url)
        patch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # export within 0.1 s, not 5 s
        for name in ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_EXPORTER_OTLP_PROTOCOL"):
            patch.delenv(name, raising=False)
        yield phoenix


@pytest.fixture(scope="module")
def traced_engine(traced_env, tiny_model_path, tmp_path_factory):
    script = tmp_path_factory.mktemp("script") / "script.json"
    script.write_text(json.dumps({"rules": [{"match": None, "reply": "OK."}]}))
    process = EngineProcess("tiny", scripted=True, script=script)
    with process:
        yield process


def traced_gateway(engine_url: str, store: Path, admin_key: str) -> GatewayThread:
    return GatewayThread(
        GatewayConfig(engine_url=engine_url, model="tiny", store_path=store, port=0, admin_key=admin_key)
    )


def lineage(span: Span, spans: list[Span]) -> list[str]:
    """The names from `span`'s parent up to the trace's root."""
    by_id = {s.span_id: s for s in spans}
    names = []
    while span.parent_id in by_id:
        span = by_id[span.parent_id]
        names.append(span.name)
    return names


async def test_an_episode_arrives_as_one_trace(
    traced_env: PhoenixServer, traced_engine: EngineProcess, alfworld_data: Path, admin_key: str, tmp_path: Path
):
    store = tmp_path / "trajectories.sqlite"
    runner = Tracing.start("runner")
    env_config = ServerConfig("alfworld", {"data_dir": str(alfworld_data)}, port=0, manager=ManagerConfig(workers=1))
    with traced_gateway(traced_engine.url, store, admin_key) as gateway_url:
        async with (
            serving(env_config) as env_url,
            EnvClient(env_url, tracing=runner) as env,
            GatewayClient(gateway_url, admin_key=admin_key, tracing=runner) as gateway,
        ):
            tasks = (await env.tasks("train"))[:1]
            run = RunConfig(concurrency=1, max_turns=1, run_id="traced", progress=False, tracing=runner)
            [result] = await run_episodes(tasks, env, ToolAgent(max_tokens=8), [], run, gateway)
    runner.shutdown()
    assert (result.status, result.turns) == ("ok", 1)
    with TrajectoryReader(store) as reader:
        [call] = reader.calls(result.session_id)

    wanted = {
        "episode",
        "env.reset",
        "env.step",
        "gateway.call",
        "gateway.plan",
        "gateway.engine",
        "gateway.record",
        "engine.generate",
        "episode.report",
    }
    spans = traced_env.trace(call.trace_id, wanted)
    assert wanted <= {s.name for s in spans}
    one = {s.name: s for s in spans}
    episode, model_call = one["episode"], one["gateway.call"]
    assert episode.parent_id is None and episode.attributes["roost.session_id"] == result.session_id
    assert model_call.parent_id == episode.span_id and call.span_id == model_call.span_id
    assert [one[n].parent_id for n in ("gateway.plan", "gateway.engine", "gateway.record")] == [model_call.span_id] * 3
    assert lineage(one["engine.generate"], spans)[-3:] == ["gateway.engine", "gateway.call", "episode"]
    assert lineage(one["env.reset"], spans)[-1] == lineage(one["env.step"], spans)[-1] == "episode"
    assert one["env.step"].attributes["roost.episode_id"] == one["env.reset"].attributes["roost.episode_id"]


async def test_a_harness_that_sends_a_traceparent_gets_its_streamed_call_in_its_trace(
    traced_env: PhoenixServer, traced_engine: EngineProcess, admin_key: str, tmp_path: Path
):
    store = tmp_path / "trajectories.sqlite"
    harness_trace, harness_span = secrets.token_hex(16), secrets.token_hex(8)
    with traced_gateway(traced_engine.url, store, admin_key) as gateway_url:
        async with GatewayClient(gateway_url, admin_key=admin_key) as gateway:
            session = await gateway.create_session("harness", {"id": "t0"})
        async with httpx.AsyncClient(timeout=60) as http:
            answer = await http.post(
                f"{session.base_url}/chat/completions",
                headers={
                    "Authorization": f"Bearer {session.key}",
                    "traceparent": f"00-{harness_trace}-{harness_span}-01",
                },
                json={
                    "model": "tiny",
                    "max_tokens": 4,
                    "stream": True,
                    "messages": [{"role": "user", "content": "hi"}],
                },
            )
    assert answer.status_code == 200, answer.text
    with TrajectoryReader(store) as reader:
        [call] = reader.calls(session.session_id)
    assert call.trace_id == harness_trace
    spans = traced_env.trace(harness_trace, {"gateway.call", "gateway.record", "engine.generate"})
    one = {s.name: s for s in spans}
    assert one["gateway.call"].parent_id == harness_span and one["gateway.call"].span_id == call.span_id
    # a stream is recorded after its handler returned: still under its call
    assert one["gateway.record"].parent_id == call.span_id
    assert lineage(one["engine.generate"], spans)[-2:] == ["gateway.engine", "gateway.call"]


async def test_a_weight_sync_reaches_into_the_engine_s_trace(
    traced_env: PhoenixServer, traced_engine: EngineProcess, tiny_model_path: Path
):
    trainer = Tracing.start("trainer")
    with trainer.span("train.step"):
        result = await sync_weights(
            traced_engine.url,
            tiny_model_path,
            weight_version="traced-1",
            engine_key=traced_engine.api_key,
            tracing=trainer,
        )
        trace_id = trainer.current().trace_id
    trainer.shutdown()
    assert result.weight_version == "traced-1"
    load = "POST /update_weights_from_disk"  # the engine's server span, named by its route
    spans = traced_env.trace(trace_id, {"train.step", "weight_sync", load})
    one = {s.name: s for s in spans}
    assert lineage(one[load], spans)[-2:] == ["weight_sync", "train.step"]
