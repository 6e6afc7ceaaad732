"""From the gateway to a training batch: only episodes that finished `ok` are trained on, the rest are
counted by why (infra_error, timeout, agent_error, unfinished); stale samples are dropped. The
batch is read over the gateway's API (`GET /samples`) and is the batch read from its store file."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from roost.outcome import EpisodeOutcome, EpisodeStatus
from roost.rollout.gateway.control.client import GatewayClient
from roost.rollout.gateway.launch import GatewayThread
from roost.rollout.keys import bearer
from roost.rollout.store.paths import group_training_sessions
from roost.rollout.store.samples import CallRef, Sample
from roost.trainer.rl.batches import Batch, batch_of, collect_batch, sampled_versions, staleness
from roost.trainer.rl.rollouts import unfinished_backlog


def sample_of_versions(*versions: str) -> Sample:
    calls = [CallRef(f"c{i}", v) for i, v in enumerate(versions)]
    tokens = [1] + [2] * len(versions)
    return Sample(
        "s",
        "g",
        "main",
        tokens,
        [0] + [1] * len(versions),
        [0.0] * len(tokens),
        [-1] + list(range(len(versions))),
        calls,
        reward=1.0,
    )


def test_staleness_counts_from_the_oldest_sampled_token():
    assert staleness(sample_of_versions("3", "5"), current_version=5) == 2
    assert staleness(sample_of_versions("5"), current_version=5) == 0
    assert staleness(sample_of_versions("expert"), current_version=9) == 0  # not an engine version
    # vLLM's and SGLang's name for the weights they started with: the run's starting model
    assert staleness(sample_of_versions("default", "3"), current_version=3) == 3


def test_a_sample_knows_the_versions_its_calls_ran_on():
    assert sampled_versions(sample_of_versions("5", "3", "5", "expert")) == [3, 5]
    assert sampled_versions(sample_of_versions("expert")) == []


def test_a_finish_with_free_info_reads_as_the_trainer_always_read_it():
    assert EpisodeOutcome.from_info({"status": "ok", "reward": 1}) == EpisodeOutcome(reward=1.0, reward_source="env")
    assert EpisodeOutcome.from_info({}).status is EpisodeStatus.OK  # finished with no info: scored 0
    assert EpisodeOutcome.from_info({}).reward == 0.0
    failed = EpisodeOutcome.from_info({"status": "infra_error", "error": "EnvFaultError: gone", "reward": 1.0})
    assert (failed.status, failed.reward, failed.reason) == (EpisodeStatus.INFRA_ERROR, None, "EnvFaultError: gone")
    assert EpisodeOutcome.from_info({"status": "timeout"}).status is EpisodeStatus.TIMEOUT
    assert EpisodeOutcome.from_info({"status": "agent_error"}).status is EpisodeStatus.AGENT_ERROR
    assert EpisodeOutcome.from_info({"status": "won"}).status is EpisodeStatus.AGENT_ERROR  # no roost runner posts it
    assert EpisodeOutcome.from_info({"status": "ok", "reward": None, "reward_source": "none"}).reward is None


async def record(
    http: httpx.AsyncClient,
    gateway: GatewayThread,
    group: str,
    finish: dict | None,
    reward: float | None,
    outcome: EpisodeOutcome | None = None,
) -> None:
    url, admin = gateway.url, bearer(gateway.admin_key)
    session = (await http.post(f"{url}/sessions", json={"group_id": group}, headers=admin)).json()
    answer = await http.post(
        f"{session['base_url']}/chat/completions",
        headers=bearer(session["key"]),
        json={
            "model": "tiny",
            "messages": [{"role": "user", "content": "go"}],
            "max_tokens": 4,
            "custom_params": {"scripted_reply": "look"},
        },
    )
    assert answer.status_code == 200, answer.text
    if reward is not None:
        await http.post(f"{url}/sessions/{session['session_id']}/reward", json={"reward": reward}, headers=admin)
    if finish is not None or outcome is not None:
        body = {"info": finish or {}, **({"outcome": outcome.model_dump(mode="json")} if outcome else {})}
        done = await http.post(f"{url}/sessions/{session['session_id']}/finish", json=body, headers=admin)
        assert done.status_code == 200, done.text


@dataclass
class Recording:
    gateway: GatewayThread
    store: Path
    version: int
    """The engine's weight version: its samples are that fresh."""

    async def batch(self, groups: list[str], current_version: int, max_staleness: int | None) -> Batch:
        """The batch over the API, checked against the batch read from the store file."""
        async with GatewayClient(self.gateway.url, admin_key=self.gateway.admin_key) as gateway:
            batch = await collect_batch(
                gateway, groups, current_version=current_version, max_staleness=max_staleness, page_size=2
            )
        from_file = group_training_sessions(self.store, groups)
        assert batch == batch_of(from_file, current_version=current_version, max_staleness=max_staleness)
        return batch

    async def backlog(self, consumed: set[str], group_size: int) -> list[str]:
        async with GatewayClient(self.gateway.url, admin_key=self.gateway.admin_key) as gateway:
            return await unfinished_backlog(gateway, consumed, group_size)


@pytest.fixture
async def recording(scripted_engine_url, tmp_path):
    """A gateway on the scripted engine, recording into a store of its own."""
    from roost.rollout.engine_api.sglang_client import SGLangClient
    from roost.rollout.gateway.config import GatewayConfig

    async with SGLangClient(scripted_engine_url) as engine:
        version = int((await engine.model_info())["weight_version"])
    store = tmp_path / "store.sqlite"
    gateway = GatewayThread(GatewayConfig(engine_url=scripted_engine_url, model="tiny", store_path=store, port=0))
    with gateway:
        yield Recording(gateway, store, version)


async def test_only_ok_sessions_are_trained_and_the_rest_are_counted(recording):
    gateway, version = recording.gateway, recording.version
    async with httpx.AsyncClient(timeout=60) as http:
        await record(http, gateway, "g0/t", {"status": "ok", "reward": 1.0}, 1.0)
        await record(http, gateway, "g0/t", {"status": "ok", "reward": 0.0}, 0.0)
        await record(http, gateway, "g0/t", {"status": "infra_error", "error": "EnvFaultError: died"}, None)
        await record(http, gateway, "g0/t", {"status": "timeout", "error": "HarnessTimeout: 5s"}, None)
        await record(http, gateway, "g0/t", {"status": "agent_error", "error": "AgentError: no plan"}, None)
        await record(http, gateway, "g0/t", None, None)  # still open (a crash mid-episode)
    batch = await recording.batch(["g0/t"], current_version=version, max_staleness=0)
    assert batch.counts == {"ok": 2, "infra_error": 1, "timeout": 1, "agent_error": 1, "open": 1, "samples": 2}
    assert [len(g.samples) for g in batch.groups] == [2] and sorted(batch.rewards) == [0.0, 1.0]
    assert batch.staleness == [0, 0] and batch.versions == [[version], [version]]

    later = await recording.batch(["g0/t"], current_version=version + 2, max_staleness=1)
    assert later.groups == [] and later.counts["dropped_stale"] == 2 and later.rewards == []
    kept = await recording.batch(["g0/t"], current_version=version + 1, max_staleness=1)
    assert kept.staleness == [1, 1]


async def test_an_ok_session_with_no_reward_is_left_out_and_counted(recording):
    # a command harness the env did not end that wrote no reward file: `roost run` reports
    # reward_source none, and the trainer has nothing to score it by
    async with httpx.AsyncClient(timeout=60) as http:
        await record(http, recording.gateway, "g1/t", {"status": "ok", "reward": 0.5, "reward_source": "file"}, 0.5)
        await record(http, recording.gateway, "g1/t", {"status": "ok", "reward": None, "reward_source": "none"}, None)
    batch = await recording.batch(["g1/t"], current_version=recording.version, max_staleness=0)
    assert batch.counts == {"ok": 1, "no_reward": 1, "samples": 1} and batch.rewards == [0.5]


async def test_only_complete_groups_of_training_episodes_are_backlog(recording):
    """What the outcome's kind says decides, not the group's name: a finished eval group is no backlog."""
    trained = EpisodeOutcome(reward=1.0, reward_source="env")
    async with httpx.AsyncClient(timeout=60) as http:
        for group, kind in [("run-a/t", "train"), ("held-out/t", "eval"), ("demos/t", "sft")]:
            for _ in range(2):
                await record(http, recording.gateway, group, None, 1.0, EpisodeOutcome(reward=1.0, kind=kind))
        await record(http, recording.gateway, "run-b/t", None, 1.0, trained)
        await record(http, recording.gateway, "run-b/t", None, None)  # still open
        await record(http, recording.gateway, "run-c/t", None, 1.0, trained)
        await record(http, recording.gateway, "run-c/t", None, 1.0, trained)
    assert await recording.backlog(set(), group_size=2) == ["run-a/t", "run-c/t"]
    assert await recording.backlog({"run-a/t"}, group_size=2) == ["run-c/t"]


async def test_a_finish_with_a_bad_outcome_is_refused_and_the_session_stays_open(recording):
    async with httpx.AsyncClient(timeout=60) as http:
        url, admin = recording.gateway.url, bearer(recording.gateway.admin_key)
        session = (await http.post(f"{url}/sessions", json={"group_id": "g2/t"}, headers=admin)).json()
        for outcome, needle in [
            ({"status": "won"}, "outcome.status"),
            ({"kind": "play"}, "outcome.kind"),
            ({"grade": "A"}, "outcome.grade"),
        ]:
            answer = await http.post(
                f"{url}/sessions/{session['session_id']}/finish", json={"outcome": outcome}, headers=admin
            )
            assert answer.status_code == 400 and needle in answer.text, answer.text
        view = (await http.get(f"{url}/sessions/{session['session_id']}", headers=admin)).json()
        assert view["status"] == "open" and view["outcome"] is None
        listed = await http.get(f"{url}/sessions", params={"status": "done"}, headers=admin)
        assert listed.status_code == 400 and "open, finished" in listed.text


@pytest.fixture(scope="module")
def sample_store_gateway(scripted_engine_url, tmp_path_factory):
    """A gateway serving a store of many sessions: every outcome, forks, a sub-agent, refused calls,
    old and new weight versions (tests/rollout/sample_store.py)."""
    from roost.rollout.gateway.config import GatewayConfig
    from roost.tests.rollout.sample_store import write_sample_store

    store = write_sample_store(tmp_path_factory.mktemp("batches") / "trajectories.sqlite")
    gateway = GatewayThread(GatewayConfig(engine_url=scripted_engine_url, model="tiny", store_path=store, port=0))
    with gateway:
        yield Recording(gateway, store, 2)


@pytest.mark.parametrize(("current_version", "max_staleness"), [(2, None), (2, 0), (2, 1), (1, 1), (0, 0)])
async def test_the_batch_over_the_api_is_the_batch_from_the_store_file(
    sample_store_gateway, current_version, max_staleness
):
    from roost.tests.rollout.sample_store import GROUPS

    # Recording.batch asserts it: the same groups, samples (bit for bit: floats compare by value,
    # and -0.0 == 0.0, so the bits are compared too), counts, staleness, rewards, refusals
    batch = await sample_store_gateway.batch(GROUPS, current_version, max_staleness)
    from_file = batch_of(
        group_training_sessions(sample_store_gateway.store, GROUPS),
        current_version=current_version,
        max_staleness=max_staleness,
    )
    pairs = [(a, b) for ga, gb in zip(batch.groups, from_file.groups) for a, b in zip(ga.samples, gb.samples)]
    assert [struct.pack(f"<{len(a.rollout_logprobs)}d", *a.rollout_logprobs) for a, _ in pairs] == [
        struct.pack(f"<{len(b.rollout_logprobs)}d", *b.rollout_logprobs) for _, b in pairs
    ]
    # what the store holds shows in the batch: every reason to leave a session out, refused calls
    assert {"ok", "infra_error", "timeout", "no_reward", "open", "untrainable_calls"} <= batch.counts.keys()
    assert {s.agent_id for g in batch.groups for s in g.samples} <= {"main", "helper"}
    if max_staleness is None:
        assert batch.counts["samples"] == 25 and len(batch.groups) == 3
        assert {s.agent_id for g in batch.groups for s in g.samples} == {"main", "helper"}
