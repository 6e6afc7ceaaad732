"""Several engines behind one gateway (issue 33): session affinity, placement of new sessions,
failover when an engine dies, engines added and removed at run time, engines of another model
refused, and the weight-sync barrier across engines.

Every engine is roost's real embedded engine (the tiny model, the scripted sampler) serving on
127.0.0.1, every gateway a real one, each in a thread of this process; the client is the openai SDK. Which engine served a call is read
from the engines' own /metrics and from the store's `engine` column.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import ExitStack
from dataclasses import dataclass

import httpx
import openai
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from roost.rollout.engine.launch import build_engine
from roost.rollout.engine.server import create_app
from roost.rollout.engine_api.model_identity import ModelIdentity, config_digest, tokenizer_fingerprint
from roost.rollout.gateway.config import GatewayConfig
from roost.rollout.gateway.gateway import Gateway, GatewayStartupError
from roost.rollout.gateway.launch import GatewayThread
from roost.rollout.keys import bearer
from roost.rollout.store.reader import TrajectoryReader
from roost.serving.thread import UvicornThread
from roost.tests.rollout.gateway_helpers import new_session, say
from roost.trainer.weight_sync import WeightSyncError, sync_weights

ENGINE_KEY = "rek-shared-by-the-router-tests"
OTHER_KEY = "rek-another-key-entirely"


class RunningEngine:
    """A real embedded engine (the tiny model, the scripted sampler) served on 127.0.0.1 from a
    thread of this process, as `roost engine` serves it: it starts in a second where a subprocess
    takes a minute on a busy machine. `stop()` is the engine dying: its port refuses connections."""

    def __init__(self, model: str = "tiny", key: str = ENGINE_KEY):
        self.api_key = key
        self.engine = build_engine(model, scripted=True)
        self.engine.start()
        self.server = UvicornThread(uvicorn.Config(create_app(self.engine, key), log_level="warning"), model)
        self.url = self.server.start()
        self._stopped = False

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self.server.stop()
            self.engine.stop()


@dataclass
class Fleet:
    a: RunningEngine
    b: RunningEngine
    spare: RunningEngine
    """Of the tiny model, with a key of its own: the weight sync cannot update it; then the
    failover test kills it."""
    other_model: RunningEngine
    """The tiny model's variant with wider attention heads: same tokenizer, other weights."""


@pytest.fixture(scope="module")
def fleet():
    with ExitStack() as stack:
        engines = []
        for model, key in (("tiny", ENGINE_KEY), ("tiny", ENGINE_KEY), ("tiny", OTHER_KEY), ("tiny-vllm", ENGINE_KEY)):
            engines.append(RunningEngine(model, key))
            stack.callback(engines[-1].stop)
        yield Fleet(*engines)


@pytest.fixture(scope="module")
def engines(fleet):
    """The two engines of the tiny model sharing a key; the weight-sync test changes their version."""
    return fleet.a, fleet.b


def _gateway(urls: list[str], tmp_path, **overrides) -> GatewayThread:
    config = GatewayConfig(
        engine_urls=urls,
        model="tiny",
        store_path=tmp_path / "trajectories.sqlite",
        engine_key=ENGINE_KEY,
        engine_probe_s=0.2,
        **overrides,
    )
    return GatewayThread(config)


def _requests_served(engine_url: str) -> float:
    """The engine's own count of finished requests (`roost_engine_requests_total`)."""
    text = httpx.get(f"{engine_url}/metrics").text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        if family.name == "roost_engine_requests"
        for s in family.samples
        if s.name == "roost_engine_requests_total"
    )


def _chat(session: dict, text: str, history: list | None = None) -> tuple[str, list]:
    """One chat call through the openai SDK; the recorded call's id and the longer history."""
    client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"], max_retries=0)
    messages = (history or []) + [{"role": "user", "content": f"Say {text}"}]
    answer = client.chat.completions.create(model="tiny", messages=messages, extra_body=say(text))
    assert answer.choices[0].message.content == text
    return answer.id.removeprefix("chatcmpl-"), messages + [{"role": "assistant", "content": text}]


def _chat_streamed(session: dict, text: str) -> str:
    """One streamed chat call through the openai SDK; the recorded call's id."""
    client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"], max_retries=0)
    messages = [{"role": "user", "content": f"Say {text}"}]
    chunks = list(client.chat.completions.create(model="tiny", messages=messages, extra_body=say(text), stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    return chunks[0].id.removeprefix("chatcmpl-")


def _engines_view(server: GatewayThread) -> dict:
    answer = httpx.get(f"{server.url}/admin/engines", headers=bearer(server.admin_key))
    answer.raise_for_status()
    return answer.json()


def _stored(server: GatewayThread, session_id: str):
    with TrajectoryReader(server.config.store_path) as reader:
        return reader.calls(session_id)


def test_sessions_stick_to_one_engine_and_new_sessions_spread(engines, tmp_path):
    a, b = engines
    before = {a.url: _requests_served(a.url), b.url: _requests_served(b.url)}
    server = _gateway([a.url, b.url], tmp_path)
    with server:
        sessions = [new_session(server) for _ in range(4)]
        for session in sessions:
            history = None
            for turn in range(3):
                _, history = _chat(session, f"Turn {turn}.", history)
        view = _engines_view(server)
        on = {s["session_id"]: {c.engine for c in _stored(server, s["session_id"])} for s in sessions}
    assert all(len(urls) == 1 for urls in on.values()), f"a session's calls went to several engines: {on}"
    placed = [next(iter(urls)) for urls in on.values()]
    assert placed.count(a.url) == 2 and placed.count(b.url) == 2, placed
    # The engines' own counts agree with the store: 2 sessions x 3 calls each.
    assert _requests_served(a.url) - before[a.url] == 6
    assert _requests_served(b.url) - before[b.url] == 6
    assert [(e["url"], e["state"], e["calls"], e["sessions"]) for e in view["engines"]] == [
        (a.url, "up", 6, 2),
        (b.url, "up", 6, 2),
    ]


def test_with_no_engine_up_a_call_is_a_503_with_retry_after_and_an_engine_can_join_again(engines, tmp_path):
    a, b = engines
    server = _gateway([a.url, b.url], tmp_path)
    with server:
        session = new_session(server)
        admin = bearer(server.admin_key)
        ids = [e["engine_id"] for e in _engines_view(server)["engines"]]
        assert httpx.delete(f"{server.url}/admin/engines/{ids[0]}", headers=admin).status_code == 200
        last = httpx.delete(f"{server.url}/admin/engines/{ids[1]}", headers=admin)
        assert last.status_code == 409 and "last engine" in last.json()["error"]["message"]
        unknown = httpx.delete(f"{server.url}/admin/engines/e99", headers=admin)
        assert unknown.status_code == 404 and ids[1] in unknown.json()["error"]["message"]
        again = httpx.post(f"{server.url}/admin/engines", json={"url": a.url}, headers=admin)
        assert again.status_code == 201 and again.json()["state"] == "up"
        twice = httpx.post(f"{server.url}/admin/engines", json={"url": a.url}, headers=admin)
        assert twice.status_code == 409
        _chat(session, "Still here.")
        # A barrier at a version no engine serves takes both out of rotation (stale): the call is
        # refused with Retry-After and the session kept.
        barrier = httpx.post(f"{server.url}/admin/weight_version", json={"weight_version": "nobody"}, headers=admin)
        assert {e["state"] for e in barrier.json()["engines"]} == {"stale"}
        answer = httpx.post(
            f"{session['base_url']}/chat/completions",
            headers=bearer(session["key"]),
            json={"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], **say("x")},
        )
        assert answer.status_code == 503 and answer.headers["Retry-After"] == "2"
        assert answer.json()["error"]["code"] == "no_engine_up"
        assert len(_stored(server, session["session_id"])) == 1


def test_an_engine_of_another_model_is_refused_at_start_and_at_run_time(engines, fleet, tmp_path):
    a, _ = engines
    other_model_engine = fleet.other_model
    config = GatewayConfig(engine_urls=[a.url, other_model_engine.url], model="tiny", store_path=tmp_path / "s.sqlite")
    gateway = Gateway(config)

    async def start() -> None:
        try:
            await gateway.start()
        finally:
            await gateway.stop()

    with pytest.raises(GatewayStartupError, match=f"engine at {other_model_engine.url} .*model_config"):
        asyncio.run(start())
    server = _gateway([a.url], tmp_path)
    with server:
        answer = httpx.post(
            f"{server.url}/admin/engines", json={"url": other_model_engine.url}, headers=bearer(server.admin_key)
        )
        assert answer.status_code == 400, answer.text
        assert "model_config" in answer.json()["error"]["message"]
        assert [e["url"] for e in _engines_view(server)["engines"]] == [a.url]
        bad = httpx.post(f"{server.url}/admin/engines", json={"url": "not a url"}, headers=bearer(server.admin_key))
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "url"


def test_engines_are_compared_by_the_digests_they_report_of_their_own_folders(engines, fleet):
    a, _ = engines
    info = httpx.get(f"{a.url}/get_model_info").json()
    assert info["tokenizer_digest"] == tokenizer_fingerprint(info["tokenizer_path"])
    assert info["config_digest"] == config_digest(info["model_path"])

    def seen_from_another_machine(answer: dict) -> ModelIdentity:  # the engine's folders are not there
        return ModelIdentity.of({**answer, "model_path": "/elsewhere/model", "tokenizer_path": "/elsewhere/model"})

    assert seen_from_another_machine(info) == ModelIdentity.of(info)
    other = httpx.get(f"{fleet.other_model.url}/get_model_info").json()
    differences = seen_from_another_machine(info).differences(seen_from_another_machine(other))
    assert any(d.startswith("model_config ") for d in differences), differences


def _version(engine: RunningEngine) -> str:
    return httpx.get(f"{engine.url}/get_model_info").json()["weight_version"]


def test_a_weight_sync_bumps_every_engine_and_one_that_fails_goes_stale(engines, fleet, tiny_model_path, tmp_path):
    a, b = engines
    server = _gateway([a.url, b.url], tmp_path)
    with server:
        result = asyncio.run(
            sync_weights(
                a.url,
                tiny_model_path,
                weight_version="router-v2",
                engine_key=ENGINE_KEY,
                gateway_url=server.url,
                admin_key=server.admin_key,
            )
        )
        assert result.weight_version == "router-v2"
        assert _version(a) == _version(b) == "router-v2"
        view = _engines_view(server)
        assert view["weight_version"] == "router-v2"
        assert {(e["state"], e["weight_version"]) for e in view["engines"]} == {("up", "router-v2")}
        sessions = [new_session(server) for _ in range(2)]
        for session in sessions:
            _chat(session, "New weights.")
        calls = [c for s in sessions for c in _stored(server, s["session_id"])]
        assert {c.engine for c in calls} == {a.url, b.url}
        assert {c.weight_version for c in calls} == {"router-v2"}

        # An engine with another key refuses the update: it goes stale, the other serves v3.
        other = fleet.spare
        admin = bearer(server.admin_key)
        joined = httpx.post(f"{server.url}/admin/engines", json={"url": other.url}, headers=admin)
        assert joined.status_code == 201 and joined.json()["state"] == "stale"  # behind router-v2
        with pytest.raises(WeightSyncError, match=f"engine at {other.url} did not load .*401.*stale"):
            asyncio.run(
                sync_weights(
                    a.url,
                    tiny_model_path,
                    weight_version="router-v3",
                    engine_key=ENGINE_KEY,
                    gateway_url=server.url,
                    admin_key=server.admin_key,
                )
            )
        states = {e["url"]: (e["state"], e["weight_version"]) for e in _engines_view(server)["engines"]}
        assert states == {
            a.url: ("up", "router-v3"),
            b.url: ("up", "router-v3"),
            other.url: ("stale", _version(other)),
        }
        assert _version(other) != "router-v3"
        assert not server.gateway.gate.paused
        # Synced by hand, it is probed back into rotation.
        httpx.post(
            f"{other.url}/update_weight_version",
            json={"new_version": "router-v3"},
            headers=bearer(OTHER_KEY),
        ).raise_for_status()
        deadline = time.monotonic() + 10
        while _engines_view(server)["engines"][2]["state"] != "up" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _engines_view(server)["engines"][2]["state"] == "up"


def test_a_dead_engines_session_moves_and_every_call_is_recorded_once(engines, fleet, tmp_path):
    a, _ = engines
    doomed = fleet.spare  # the weight-sync test, which runs before, is done with it
    server = _gateway([doomed.url, a.url], tmp_path)
    with server:
        first, second, third = new_session(server), new_session(server), new_session(server)
        returned = []
        history = None
        for turn in range(2):
            call_id, history = _chat(first, f"Before {turn}.", history)
            returned.append(call_id)
        _chat(second, "Elsewhere.")
        streamed = [_chat_streamed(third, "Streamed before.")]
        doomed.stop()  # the engine holding `first`'s and `third`'s caches dies between their calls
        for turn in range(2):
            call_id, history = _chat(first, f"After {turn}.", history)
            returned.append(call_id)
        streamed.append(_chat_streamed(third, "Streamed after."))
        view = {e["url"]: e for e in _engines_view(server)["engines"]}
        stored = _stored(server, first["session_id"])
        stored_streams = sorted(_stored(server, third["session_id"]), key=lambda c: c.seq)
    assert [(c.call_id, c.engine) for c in stored_streams] == list(zip(streamed, [doomed.url, a.url]))
    assert [c.call_id for c in sorted(stored, key=lambda c: c.seq)] == returned  # each once, none lost
    assert [c.engine for c in sorted(stored, key=lambda c: c.seq)] == [doomed.url] * 2 + [a.url] * 2
    assert view[doomed.url]["state"] == "down" and "unreachable" in view[doomed.url]["error"]
    assert view[a.url]["sessions"] == 3
