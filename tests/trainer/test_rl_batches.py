"""From the store to a training batch: only episodes that finished `ok` are trained on, the rest are
counted by why (infra_error, timeout, agent_error, unfinished); stale samples are dropped."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from roost.agents.results import EpisodeStatus
from roost.rollout.gateway.launch import GatewayThread
from roost.rollout.keys import bearer
from roost.rollout.store.samples import CallRef, Sample
from roost.trainer.rl.batches import collect_batch, sampled_versions, session_status, staleness


def sample_of_versions(*versions: str) -> Sample:
    calls = [CallRef(f"c{i}", v) for i, v in enumerate(versions)]
    tokens = [1] + [2] * len(versions)
    return Sample("s", "g", "main", tokens, [0] + [1] * len(versions), [0.0] * len(tokens),
                  [-1] + list(range(len(versions))), calls, reward=1.0)


def test_staleness_counts_from_the_oldest_sampled_token():
    assert staleness(sample_of_versions("3", "5"), current_version=5) == 2
    assert staleness(sample_of_versions("5"), current_version=5) == 0
    assert staleness(sample_of_versions("expert"), current_version=9) == 0  # not an engine version
    # vLLM's and SGLang's name for the weights they started with: the run's starting model
    assert staleness(sample_of_versions("default", "3"), current_version=3) == 3


def test_a_sample_knows_the_versions_its_calls_ran_on():
    assert sampled_versions(sample_of_versions("5", "3", "5", "expert")) == [3, 5]
    assert sampled_versions(sample_of_versions("expert")) == []


def test_timeouts_are_told_apart_from_other_harness_errors():
    assert session_status({"status": "ok"}) is EpisodeStatus.OK
    assert session_status({}) is EpisodeStatus.OK  # finished with no info
    assert session_status({"status": "infra_error", "error": "EnvFaultError: gone"}) is EpisodeStatus.INFRA_ERROR
    assert session_status({"status": "timeout", "error": "HarnessTimeout: ran past"}) is EpisodeStatus.TIMEOUT
    assert session_status({"status": "agent_error", "error": "AgentError: no plan"}) is EpisodeStatus.AGENT_ERROR
    assert session_status({"status": "won"}) is EpisodeStatus.AGENT_ERROR  # no roost runner posts it: left out


async def record(http: httpx.AsyncClient, gateway: GatewayThread, group: str, finish: dict | None,
                 reward: float | None) -> None:
    url, admin = gateway.url, bearer(gateway.admin_key)
    session = (await http.post(f"{url}/sessions", json={"group_id": group}, headers=admin)).json()
    answer = await http.post(f"{session['base_url']}/chat/completions", headers=bearer(session["key"]), json={
        "model": "tiny", "messages": [{"role": "user", "content": "go"}], "max_tokens": 4,
        "custom_params": {"scripted_reply": "look"}})
    assert answer.status_code == 200, answer.text
    if reward is not None:
        await http.post(f"{url}/sessions/{session['session_id']}/reward", json={"reward": reward}, headers=admin)
    if finish is not None:
        await http.post(f"{url}/sessions/{session['session_id']}/finish", json={"info": finish}, headers=admin)


@dataclass
class Recording:
    gateway: GatewayThread
    store: Path
    version: int
    """The engine's weight version: its samples are that fresh."""


@pytest.fixture
async def recording(scripted_engine_url, tmp_path):
    """A gateway on the scripted engine, recording into a store of its own."""
    from roost.rollout.gateway.config import GatewayConfig
    from roost.rollout.sglang_client import SGLangClient

    async with SGLangClient(scripted_engine_url) as engine:
        version = int((await engine.model_info())["weight_version"])
    store = tmp_path / "store.sqlite"
    gateway = GatewayThread(GatewayConfig(engine_url=scripted_engine_url, model="tiny", store_path=store, port=0))
    with gateway:
        yield Recording(gateway, store, version)


async def test_only_ok_sessions_are_trained_and_the_rest_are_counted(recording):
    gateway, store, version = recording.gateway, recording.store, recording.version
    async with httpx.AsyncClient(timeout=60) as http:
        await record(http, gateway, "g0/t", {"status": "ok", "reward": 1.0}, 1.0)
        await record(http, gateway, "g0/t", {"status": "ok", "reward": 0.0}, 0.0)
        await record(http, gateway, "g0/t", {"status": "infra_error", "error": "EnvFaultError: died"}, None)
        await record(http, gateway, "g0/t", {"status": "timeout", "error": "HarnessTimeout: 5s"}, None)
        await record(http, gateway, "g0/t", {"status": "agent_error", "error": "AgentError: no plan"}, None)
        await record(http, gateway, "g0/t", None, None)  # still open (a crash mid-episode)
    batch = collect_batch(store, ["g0/t"], current_version=version, max_staleness=0)
    assert batch.counts == {"ok": 2, "infra_error": 1, "timeout": 1, "agent_error": 1, "open": 1, "samples": 2}
    assert [len(g.samples) for g in batch.groups] == [2] and sorted(batch.rewards) == [0.0, 1.0]
    assert batch.staleness == [0, 0] and batch.versions == [[version], [version]]

    later = collect_batch(store, ["g0/t"], current_version=version + 2, max_staleness=1)
    assert later.groups == [] and later.counts["dropped_stale"] == 2
    kept = collect_batch(store, ["g0/t"], current_version=version + 1, max_staleness=1)
    assert kept.staleness == [1, 1]


async def test_an_ok_session_with_no_reward_is_left_out_and_counted(recording):
    # a command harness the env did not end that wrote no reward file: `roost run` reports
    # reward_source none, and the trainer has nothing to score it by
    async with httpx.AsyncClient(timeout=60) as http:
        await record(http, recording.gateway, "g1/t", {"status": "ok", "reward": 0.5, "reward_source": "file"}, 0.5)
        await record(http, recording.gateway, "g1/t", {"status": "ok", "reward": None, "reward_source": "none"}, None)
    batch = collect_batch(recording.store, ["g1/t"], current_version=recording.version, max_staleness=0)
    assert batch.counts == {"ok": 1, "no_reward": 1, "samples": 1} and batch.rewards == [0.5]
