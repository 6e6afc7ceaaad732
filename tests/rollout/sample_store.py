"""A trajectory store written by the store's own writer with what the trainer must read back the
same whichever way it reads it: groups of sessions of every outcome, extended and forked calls,
a sub-agent, pass-through calls that are not training data, weight versions old and new, step,
agent and session rewards, posted advantages, sessions created at the same instant, and
logprobs whose exact bits matter (subnormals, -0.0, 0.1 + 0.2)."""

from __future__ import annotations

import asyncio
import random
from array import array
from pathlib import Path

from roost.outcome import EpisodeOutcome, EpisodeStatus, RewardSource
from roost.rollout.store.records import AdvantageRecord, CallRecord, RewardRecord, SessionRecord
from roost.rollout.store.trajectory_store import TrajectoryStore

GROUPS = ["g0/task-a", "g1/task-b", "g2/task-c"]
SESSIONS_PER_GROUP = 7
TRICKY_FLOATS = [5e-324, -0.0, -(0.1 + 0.2), -2.2250738585072014e-308, -1e-17, -123.456789012345678]

OUTCOMES: list[EpisodeOutcome | None] = [
    EpisodeOutcome(reward=1.0, reward_source=RewardSource.ENV),
    EpisodeOutcome(reward=0.0, reward_source=RewardSource.ENV),
    EpisodeOutcome(status=EpisodeStatus.INFRA_ERROR, reason="EnvFaultError: died"),
    EpisodeOutcome(reward=None, reward_source=RewardSource.NONE),  # ok, no reward
    None,  # still open
    EpisodeOutcome(status=EpisodeStatus.TIMEOUT, reason="HarnessTimeout: 5s"),
    EpisodeOutcome(reward=0.25, reward_source=RewardSource.FILE),
]
VERSIONS = ["2", "1", "default", "0", "expert"]


def _call(rng: random.Random, sid: str, cid: str, seq: int, prompt: list[int], **kw) -> CallRecord:
    sampled = kw.pop("sampled", [rng.randrange(10, 300) for _ in range(rng.randrange(1, 5))])
    logprobs = kw.pop("logprobs", [-rng.random() * 8 for _ in sampled])
    fields = dict(
        agent_id="main",
        parent_agent=None,
        parent_call_id=None,
        shared_prefix_len=0,
        kind="root",
        backend="embedded",
        weight_version=VERSIONS[seq % len(VERSIONS)],
        sampling_params={},
    )
    fields.update(kw)
    return CallRecord(
        call_id=cid,
        session_id=sid,
        seq=seq,
        endpoint="chat",
        model="tiny",
        reuse="exact" if fields["kind"] == "extend" else "none",
        prompt_ids=array("i", prompt),
        sampled_ids=array("i", sampled),
        sampled_logprobs=array("d", logprobs),
        finish_reason={"type": "stop"},
        timings={},
        request={},
        response={},
        created_at=float(seq),
        **fields,
    )


def _session_calls(rng: random.Random, sid: str, n: int) -> list[CallRecord]:
    """Root, an extension of it, a fork off its prompt, a sub-agent's call; some sessions add a
    pass-through call without ids, or one with too few logprobs on the extended path."""
    prompt = [1, 2, 3, rng.randrange(10, 300)]
    tricky = [TRICKY_FLOATS[(n + k) % len(TRICKY_FLOATS)] for k in range(3)]
    root = _call(rng, sid, f"{sid}-a", 0, prompt, sampled=[40, 41, 42], logprobs=tricky)
    ext_prompt = list(root.prompt_ids) + list(root.sampled_ids) + [7, 8]
    ext = _call(
        rng, sid, f"{sid}-b", 1, ext_prompt, parent_call_id=root.call_id, shared_prefix_len=root.path_len, kind="extend"
    )
    fork = _call(
        rng, sid, f"{sid}-c", 2, prompt[:3] + [9, 9], parent_call_id=root.call_id, shared_prefix_len=3, kind="fork"
    )
    helper = _call(rng, sid, f"{sid}-h", 3, [1, 5, 6], agent_id="helper", parent_agent="main")
    calls = [root, ext, fork, helper]
    if n % 3 == 0:  # a pass-through call that returned no ids: refused, the rest still trains
        calls.append(_call(rng, sid, f"{sid}-p", 4, [], sampled=[], logprobs=[], backend="openai"))
    if n % 4 == 1:  # an extension with logprobs missing: every path through it is refused
        bad = list(ext.prompt_ids) + list(ext.sampled_ids) + [11]
        calls.append(
            _call(
                rng, sid, f"{sid}-q", 5, bad, sampled=[12, 13], logprobs=[-0.1], backend="openai",
                parent_call_id=ext.call_id, shared_prefix_len=ext.path_len, kind="extend",
            )
        )  # fmt: skip
    return calls


def _rewards_and_advantages(sid: str, calls: list[CallRecord]) -> tuple[list[RewardRecord], list[AdvantageRecord]]:
    rewards = [
        RewardRecord(sid, 0.5, created_at=1.0),
        RewardRecord(sid, 0.75, agent_id="helper", created_at=2.0),
        RewardRecord(sid, -0.125, call_id=f"{sid}-b", created_at=3.0),
    ]
    ext = next(c for c in calls if c.call_id == f"{sid}-b")
    advantages = [
        AdvantageRecord(ext.call_id, sid, None, [0.1 + 0.2 * i for i in range(len(ext.sampled_ids))], 4.0),
        AdvantageRecord(f"{sid}-c", sid, 1.0 / 3.0, None, 4.0),
    ]
    return rewards, advantages


async def _fill(store: TrajectoryStore) -> None:
    rng = random.Random(7)
    n = 0
    for g, group in enumerate(GROUPS):
        for i in range(SESSIONS_PER_GROUP):
            sid = f"s{g}-{i}"
            created = 100.0 + g * 10 + i // 2  # pairs created at the same instant: the id orders them
            await store.create_session(SessionRecord(sid, f"h{sid}", group_id=group, task={"i": i}, created_at=created))
            calls = _session_calls(rng, sid, n)
            for call in calls:
                await store.record_call(call)
            rewards, advantages = _rewards_and_advantages(sid, calls)
            for reward in rewards:
                await store.add_reward(reward)
            await store.set_advantages(advantages)
            outcome = OUTCOMES[(i + g) % len(OUTCOMES)]
            if outcome is not None:
                await store.finish_session(sid, created + 1, outcome, {"steps": i})
            n += 1


def write_sample_store(path: Path) -> Path:
    store = TrajectoryStore(path).open()
    try:
        asyncio.run(_fill(store))
    finally:
        store.close()
    return path
