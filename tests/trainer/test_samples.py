"""The Sample contract and its bad input; JSONL round trip; grouping."""

from __future__ import annotations

import json

import pytest

from roost.outcome import EpisodeOutcome, RewardSource
from roost.rollout.store.samples import Sample, SampleError
from roost.tests.trainer.trainer_fixtures import agentic_batch, make_sample
from roost.trainer.sample_sources import group_samples, read_jsonl, write_jsonl


def test_from_turns_masks_only_sampled_tokens():
    s = Sample.from_turns(
        [([1, 2], [3, 4], [-0.1, -0.2]), ([5], [6], [-0.3])], session_id="s", group_id="g", weight_version="7"
    )
    assert s.tokens == [1, 2, 3, 4, 5, 6]
    assert s.loss_mask == [0, 0, 1, 1, 0, 1]
    assert s.rollout_logprobs == [0, 0, -0.1, -0.2, 0, -0.3]
    assert s.token_call == [-1, -1, 0, 0, -1, 1]
    assert s.weight_version_of(5) == "7" and s.weight_version_of(0) is None


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(loss_mask=[0, 1]), "loss_mask has 2 entries"),
        (dict(loss_mask=[1, 0, 0]), "first token cannot be sampled"),
        (dict(loss_mask=[0, 2, 0]), "only 0 and 1"),
        (dict(reward=float("nan")), "reward is nan"),
        (dict(rollout_logprobs=[0.0, float("inf"), 0.0]), "rollout logprob of sampled token 1"),
        (dict(token_call=[-1, 3, -1]), "names call 3"),
        (dict(tokens=[], loss_mask=[], rollout_logprobs=[], token_call=[]), "no tokens"),
    ],
)
def test_contract_violations_are_named(change, message):
    sample = make_sample([1, 2, 3], [0, 1, 0])
    for key, value in change.items():
        setattr(sample, key, value)
    with pytest.raises(SampleError, match=message):
        sample.validate()


def test_jsonl_round_trip_and_grouping(tmp_path):
    samples = agentic_batch()
    back = read_jsonl(write_jsonl(samples, tmp_path / "s.jsonl"))
    assert back == samples
    groups = group_samples(back + [make_sample([1, 2], [0, 1], group="other")])
    assert [g.group_id for g in groups] == ["agentic", "other"] and len(groups[0].samples) == len(samples)


def test_jsonl_from_before_one_sample_type_still_reads(tmp_path):
    """Records written when the trainer's Sample kept the store's fields in `metadata`."""
    old = {
        "session_id": "s",
        "group_id": "g",
        "agent_id": "main",
        "tokens": [1, 2, 3, 4],
        "loss_mask": [0, 0, 1, 1],
        "rollout_logprobs": [0.0, 0.0, -0.1, -0.2],
        "token_call": [-1, -1, 0, 0],
        "calls": [{"call_id": "s/main/0", "weight_version": "0", "reward": None, "advantage": None}],
        "reward": 0.5,
        "advantages": [None, None, 1.5, None],
        "metadata": {"leaf_call_id": "c1", "task": {"id": 7}, "parent_agent": None},
    }
    (tmp_path / "old.jsonl").write_text(json.dumps(old) + "\n")
    [sample] = read_jsonl(tmp_path / "old.jsonl")
    assert (sample.task, sample.leaf_call_id, sample.parent_agent) == ({"id": 7}, "c1", None)
    assert sample.advantages == [None, None, 1.5, None] and sample.weight_version_of(3) == "0"


def test_samples_from_the_trajectory_store(tmp_path):
    """The store's root-to-leaf paths become Samples: masks, logprobs, calls, rewards, and
    posted advantages only where they were posted."""
    import asyncio
    from array import array

    from roost.rollout.store.records import AdvantageRecord, CallRecord, RewardRecord, SessionRecord
    from roost.rollout.store.trajectory_store import TrajectoryStore
    from roost.trainer.advantages import AdvantageConfig, EstimatorConfig, compute_advantages
    from roost.trainer.sample_sources import samples_from_store

    def call(cid, seq, prompt, sampled, lp, parent=None, shared=0, kind="root"):
        return CallRecord(
            call_id=cid,
            session_id="s1",
            agent_id="main",
            parent_agent=None,
            seq=seq,
            endpoint="chat",
            backend="embedded",
            model="tiny",
            parent_call_id=parent,
            shared_prefix_len=shared,
            kind=kind,
            reuse="exact" if kind == "extend" else "none",
            prompt_ids=array("i", prompt),
            sampled_ids=array("i", sampled),
            sampled_logprobs=array("d", lp),
            finish_reason={"type": "stop"},
            sampling_params={},
            weight_version="3",
            timings={},
            request={},
            response={},
            created_at=1.0,
        )

    store = TrajectoryStore(tmp_path / "t.sqlite").open()

    async def fill():
        await store.create_session(SessionRecord("s1", "h", group_id="g", created_at=1.0))
        await store.record_call(call("a", 0, [1, 2, 3], [4, 5], [-0.1, -0.2]))
        await store.record_call(call("b", 1, [1, 2, 3, 4, 5, 6], [7, 2], [-0.3, -0.4], "a", 5, "extend"))
        await store.record_call(call("c", 2, [1, 2, 3, 9, 6], [8], [-0.9], "a", 3, "fork"))
        await store.add_reward(RewardRecord("s1", 0.5))
        await store.set_advantages([AdvantageRecord("b", "s1", value=2.0)])
        await store.finish_session("s1", 2.0, EpisodeOutcome(reward=0.5, reward_source=RewardSource.ENV), {})

    asyncio.run(fill())
    store.close()
    samples = sorted(samples_from_store(tmp_path / "t.sqlite", group_ids=["g"]), key=lambda s: len(s.tokens))
    fork, extended = samples
    assert fork.tokens == [1, 2, 3, 9, 6, 8] and fork.loss_mask == [0, 0, 0, 0, 0, 1]
    assert extended.tokens == [1, 2, 3, 4, 5, 6, 7, 2] and extended.loss_mask == [0, 0, 0, 1, 1, 0, 1, 1]
    assert extended.rollout_logprobs[3:5] == [-0.1, -0.2] and [c.call_id for c in extended.calls] == ["a", "b"]
    assert extended.weight_version_of(6) == "3" and extended.reward == 0.5
    assert extended.advantages == [None] * 6 + [2.0, 2.0]
    assert [g.group_id for g in group_samples(samples)] == ["g"]
    # the posted advantage wins on call b's tokens; call a's tokens get the estimator's value
    config = AdvantageConfig(default=EstimatorConfig("grpo", {"equal_rewards": "zero"}))
    scored, _ = compute_advantages(group_samples([extended]), config)
    assert scored[0].advantages == [0, 0, 0, 0.0, 0.0, 0, 2.0, 2.0]
