"""The trajectory store: group commit, records round-trip, training samples, export."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
from array import array

import pyarrow.parquet as pq
import pytest

from roost.outcome import EpisodeOutcome, EpisodeStatus, RewardSource, SessionStatus
from roost.rollout.store.export import export
from roost.rollout.store.paths import iter_training_samples
from roost.rollout.store.reader import StoreMissing, StoreUnreadable, TrajectoryReader
from roost.rollout.store.records import (
    AdvantageRecord,
    CallRecord,
    ImageRecord,
    ImageSpan,
    RewardRecord,
    SessionRecord,
)
from roost.rollout.store.schema import OUTCOME_COLUMNS, SCHEMA_VERSION
from roost.rollout.store.trajectory_store import TrajectoryStore


def call(cid, seq, prompt, sampled, *, parent=None, shared=0, kind="root", agent="main", lp=None):
    return CallRecord(
        call_id=cid,
        session_id="s1",
        agent_id=agent,
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
        sampled_logprobs=array("d", lp if lp is not None else [-0.5] * len(sampled)),
        finish_reason={"type": "stop", "matched": 2},
        sampling_params={"max_new_tokens": 8},
        weight_version="3",
        timings={"total_ms": 1.0},
        request={"messages": [{"role": "user", "content": "x"}]},
        response={"message": {"role": "assistant", "content": "y"}},
        created_at=1.0,
    )


@pytest.fixture()
def store(tmp_path):
    store = TrajectoryStore(tmp_path / "t.sqlite").open()
    yield store
    store.close()


def _fill(store):
    async def go():
        await store.create_session(SessionRecord("s1", "h", group_id="g", task={"id": 1}, created_at=1.0))
        # root: prompt [1,2,3] sampled [4,5]; extend: prompt [1..5,6] sampled [7,2];
        # fork of the root at 3 tokens (its reply rewritten): prompt [1,2,3,9,6] sampled [8]
        await asyncio.gather(
            store.record_call(call("a", 0, [1, 2, 3], [4, 5], lp=[-0.1, -0.2])),
            store.record_call(
                call("b", 1, [1, 2, 3, 4, 5, 6], [7, 2], parent="a", shared=5, kind="extend", lp=[-0.3, -0.4])
            ),
            store.record_call(call("c", 2, [1, 2, 3, 9, 6], [8], parent="a", shared=3, kind="fork", lp=[-0.9])),
        )
        await store.add_reward(RewardRecord("s1", 0.5))
        await store.add_reward(RewardRecord("s1", 1.0, call_id="c"))
        await store.set_advantages([AdvantageRecord("b", "s1", value=2.0)])
        await store.finish_session("s1", 2.0, EpisodeOutcome(reward=1.5, reward_source=RewardSource.ENV), {"steps": 3})

    asyncio.run(go())


def test_records_round_trip_and_commit_before_return(store):
    _fill(store)
    # A second connection sees every write: each await returned after its commit.
    with TrajectoryReader(store.path) as reader:
        a = reader.call("a")
        assert list(a.prompt_ids) == [1, 2, 3] and list(a.sampled_logprobs) == [-0.1, -0.2]
        assert a.finish_reason == {"type": "stop", "matched": 2} and a.request["messages"][0]["content"] == "x"
        assert [c.call_id for c in reader.calls("s1")] == ["a", "b", "c"]
        session = reader.session("s1")
        assert session.status is SessionStatus.FINISHED and session.finish_info == {"steps": 3}
        assert session.outcome == EpisodeOutcome(reward=1.5, reward_source=RewardSource.ENV)
        assert [s.session_id for s in reader.sessions(status=SessionStatus.FINISHED)] == ["s1"]
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.writer.writes >= 7


def test_group_commit_batches_concurrent_writes(store):
    async def go():
        await store.create_session(SessionRecord("s1", "h", created_at=1.0))
        await asyncio.gather(*(store.record_call(call(f"c{i}", i, [1, 2], [3])) for i in range(500)))

    asyncio.run(go())
    with TrajectoryReader(store.path) as reader:
        assert reader.call_count("s1") == 500
    assert store.writer.batches < 100  # far fewer transactions than writes


def test_failed_write_fails_alone(store):
    async def go():
        await store.create_session(SessionRecord("s1", "h", created_at=1.0))
        results = await asyncio.gather(
            store.record_call(call("x", 0, [1], [2])),
            store.record_call(call("x", 1, [1], [2])),
            store.record_call(call("y", 2, [1], [2])),
            return_exceptions=True,
        )
        return results

    results = asyncio.run(go())
    assert results[0] is None and isinstance(results[1], sqlite3.IntegrityError) and results[2] is None
    with TrajectoryReader(store.path) as reader:
        assert sorted(c.call_id for c in reader.calls("s1")) == ["x", "y"]


def test_training_samples_are_root_to_leaf_paths(store):
    _fill(store)
    samples = {s.leaf_call_id: s for s in iter_training_samples(store.path)}
    assert sorted(samples) == ["b", "c"]  # a is inside b's path
    b = samples["b"]
    assert b.tokens == [1, 2, 3, 4, 5, 6, 7, 2]
    assert b.loss_mask == [0, 0, 0, 1, 1, 0, 1, 1]
    assert b.rollout_logprobs == [0, 0, 0, -0.1, -0.2, 0, -0.3, -0.4]
    assert b.advantages == [None] * 6 + [2.0, 2.0]
    assert b.call_ids == ["a", "b"] and [(b.calls[i].call_id, start, end) for i, start, end in b.spans()] == [
        ("a", 3, 5),
        ("b", 6, 8),
    ]
    assert b.reward == 0.5 and b.group_id == "g" and b.task == {"id": 1}
    c = samples["c"]
    assert c.tokens == [1, 2, 3, 9, 6, 8] and c.loss_mask == [0, 0, 0, 0, 0, 1]
    # a reward posted on a call is that call's step reward; the path's outcome stays the session's
    assert c.reward == 0.5 and c.advantages is None
    assert [(call.call_id, call.reward) for call in c.calls] == [("c", 1.0)]
    assert [call.reward for call in b.calls] == [None, None]


def test_unfinished_sessions_are_skipped_by_default(tmp_path):
    store = TrajectoryStore(tmp_path / "t.sqlite").open()

    async def go():
        await store.create_session(SessionRecord("s1", "h", created_at=1.0))
        await store.record_call(call("a", 0, [1], [2]))

    asyncio.run(go())
    store.close()
    assert list(iter_training_samples(tmp_path / "t.sqlite")) == []
    assert len(list(iter_training_samples(tmp_path / "t.sqlite", status=None))) == 1


@pytest.mark.parametrize("kind", ["calls", "samples"])
def test_export_jsonl_and_parquet(store, tmp_path, kind):
    _fill(store)
    n = export(store.path, tmp_path / "out.jsonl", fmt="jsonl", kind=kind)
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert n == len(rows) == (3 if kind == "calls" else 2)
    m = export(store.path, tmp_path / "out.parquet", fmt="parquet", kind=kind)
    table = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert m == n and len(table) == n
    if kind == "calls":
        assert rows[0]["prompt_ids"] == [1, 2, 3] and table[0]["sampled_ids"] == [4, 5]
        assert json.loads(table[0]["finish_reason"]) == {"type": "stop", "matched": 2}
    else:
        assert {tuple(r["loss_mask"]) for r in table} == {tuple(r["loss_mask"]) for r in rows}
        assert set(table[0]) == set(rows[0])  # the Parquet schema holds every Sample field


def test_an_image_is_stored_once_and_its_calls_and_samples_name_it(store, tmp_path):
    """Two calls carrying one image store its bytes once; each call says where its images are,
    and the leaf's sample carries the hashes of its path's images in token order."""
    pixel, other = (
        ImageRecord("a" * 64, "image/png", b"png-a", 1, 1),
        ImageRecord("b" * 64, "image/png", b"png-b", 2, 2),
    )
    first = dataclasses.replace(call("a", 0, [1, 9, 9, 2], [3]), images=[ImageSpan(pixel.sha256, 1, 2)])
    second = dataclasses.replace(
        call("b", 1, [1, 9, 9, 2, 3, 9, 4], [5], parent="a", shared=5, kind="extend"),
        images=[ImageSpan(pixel.sha256, 1, 2), ImageSpan(other.sha256, 5, 1)],
    )

    async def go():
        await store.create_session(SessionRecord("s1", "k", status=SessionStatus.OPEN))
        await store.record_call(first, [pixel])
        await store.record_call(second, [pixel, other])

    asyncio.run(go())
    with TrajectoryReader(store.path) as reader:
        assert reader.image_count() == 2 and reader.image(pixel.sha256) == pixel
        assert reader.call("b").images == second.images
    [sample] = iter_training_samples(store.path, status=None)
    assert sample.images == [pixel.sha256, other.sha256]
    export(store.path, tmp_path / "s.parquet", fmt="parquet", kind="samples")
    assert pq.read_table(tmp_path / "s.parquet").to_pylist()[0]["images"] == sample.images


def test_missing_store_says_what_to_do(tmp_path):
    with pytest.raises(StoreMissing, match="--store"):
        TrajectoryReader(tmp_path / "nope.sqlite")


def test_a_reader_checks_the_file_is_a_store_it_reads(tmp_path):
    notes = tmp_path / "notes.sqlite"
    notes.write_text("not a database\n" * 100)
    with pytest.raises(StoreUnreadable, match="is not a trajectory store"):
        TrajectoryReader(notes)
    old = tmp_path / "old.sqlite"
    with sqlite3.connect(old) as conn:  # from before calls had weight versions
        conn.executescript(
            "CREATE TABLE sessions (session_id TEXT, group_id TEXT, status TEXT);"
            "CREATE TABLE calls (call_id TEXT, session_id TEXT, messages TEXT);"
        )
    with pytest.raises(
        StoreUnreadable,
        match=r"older schema.*no agents table.*calls lacks .*calls\.weight_version"
        r".*export it with the roost that wrote it",
    ):
        TrajectoryReader(old)
    newer = tmp_path / "new.sqlite"
    TrajectoryStore(newer).open().close()
    with sqlite3.connect(newer) as conn:
        conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    with pytest.raises(StoreUnreadable, match="schema version 99; this roost reads up to"):
        TrajectoryReader(newer)


def test_export_cli(store, tmp_path):
    import subprocess
    import sys

    _fill(store)
    out = tmp_path / "samples.parquet"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "roost.cli.main",
            "trajectories",
            "export",
            "--store",
            str(store.path),
            "--format",
            "parquet",
            "--kind",
            "samples",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"] == 2 and len(pq.read_table(out)) == 2


def test_exported_samples_are_what_the_trainer_reads(store, tmp_path):
    """A samples export is `Sample` records: SFT's `jsonl` source reads back the samples the store
    made, field for field (a call's grammar, unposted advantages, a session without a group)."""
    from roost.trainer.recipe import SFTData
    from roost.trainer.sample_sources import read_jsonl
    from roost.trainer.sft.train import recorded_samples

    _fill(store)

    async def more():
        await store.create_session(SessionRecord("s2", "h", created_at=2.0))
        held = dataclasses.replace(
            call("d", 0, [1, 2], [3], lp=[-0.7]),
            session_id="s2",
            sampling_params={"max_new_tokens": 8, "regex": "go (north|south)"},
        )
        await store.record_call(held)

    asyncio.run(more())
    out = tmp_path / "out.jsonl"
    assert export(store.path, out, fmt="jsonl", kind="samples") == 3
    made = {s.leaf_call_id: s for s in iter_training_samples(store.path, status=None)}
    read = {s.leaf_call_id: s for s in read_jsonl(out)}
    assert read == made and sorted(read) == ["b", "c", "d"]
    assert read["d"].calls[0].constraint == ("regex", "go (north|south)") and read["d"].group_id == "s2"
    assert read["b"].advantages == [None] * 6 + [2.0, 2.0] and read["c"].advantages is None
    assert recorded_samples(SFTData(source="jsonl", path=str(out))) == list(read.values())
    parquet = tmp_path / "out.parquet"
    export(store.path, parquet, fmt="parquet", kind="samples")
    rows = {r["leaf_call_id"]: r for r in pq.read_table(parquet).to_pylist()}
    assert list(rows["b"]) == [*json.loads(out.read_text().splitlines()[0])]
    assert rows["b"]["rollout_logprobs"] == made["b"].rollout_logprobs and rows["b"]["format_version"] == 2


def test_reading_an_old_samples_export_says_to_export_again(tmp_path):
    old = {
        "session_id": "s",
        "group_id": None,
        "tokens": [1, 2],
        "loss_mask": [0, 1],
        "logprobs": [0, -0.1],
        "spans": [{"call_id": "a", "start": 1, "end": 2}],
        "format_version": 1,
    }
    (tmp_path / "old.jsonl").write_text(json.dumps(old) + "\n")
    from roost.trainer.sample_sources import read_jsonl

    with pytest.raises(ValueError, match=r"old.jsonl:1: a samples export row of format version 1.*export the store"):
        read_jsonl(tmp_path / "old.jsonl")


def _as_version_1(path) -> None:
    """Turn a store into one an older roost wrote: schema version 1, no trace, adapter, engine,
    images or routed_experts columns, no images table, the episode's outcome in the free finish info."""
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE calls DROP COLUMN routed_experts")
    conn.execute("ALTER TABLE calls DROP COLUMN images")
    conn.execute("DROP TABLE images")
    conn.execute("ALTER TABLE calls DROP COLUMN engine")
    conn.execute("ALTER TABLE calls DROP COLUMN adapter")
    conn.execute("ALTER TABLE calls DROP COLUMN trace_id")
    conn.execute("ALTER TABLE calls DROP COLUMN span_id")
    for column in OUTCOME_COLUMNS:
        conn.execute(f"ALTER TABLE sessions DROP COLUMN {column}")
    conn.execute("""UPDATE sessions SET finish_info='{"status": "timeout", "error": "ran past 5s"}'""")
    conn.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    conn.commit()
    conn.close()


TIMED_OUT = EpisodeOutcome(status=EpisodeStatus.TIMEOUT, reason="ran past 5s")


def test_a_store_of_schema_1_is_read_as_it_is_and_migrated_when_written(tmp_path):
    path = tmp_path / "old.sqlite"
    old = TrajectoryStore(path).open()
    _fill(old)
    old.close()
    _as_version_1(path)
    with TrajectoryReader(path) as reader:  # read-only: left as it is
        assert [
            (c.call_id, c.trace_id, c.span_id, c.adapter, c.engine, c.routed_experts) for c in reader.calls("s1")
        ] == [
            ("a", "", "", "", "", b""),
            ("b", "", "", "", "", b""),
            ("c", "", "", "", "", b""),
        ]
        assert reader.session("s1").outcome == TIMED_OUT
        assert reader.image("0" * 64) is None and all(c.images == [] for c in reader.calls("s1"))
    store = TrajectoryStore(path).open()
    traced = dataclasses.replace(
        call("d", 3, [1], [2]), trace_id="ab" * 16, span_id="cd" * 8, adapter="lora-x", engine="http://e:1"
    )
    asyncio.run(store.record_call(traced))
    store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    assert conn.execute(f"SELECT {', '.join(OUTCOME_COLUMNS)} FROM sessions").fetchall() == [
        ("timeout", None, "none", "train", "ran past 5s")
    ]
    conn.close()
    with TrajectoryReader(path) as reader:
        assert {c.call_id: c.trace_id for c in reader.calls("s1")} == {"a": "", "b": "", "c": "", "d": "ab" * 16}
        assert reader.call("d").span_id == "cd" * 8
        assert reader.call("d").adapter == "lora-x"
        assert reader.call("d").engine == "http://e:1"
        assert reader.session("s1").outcome == TIMED_OUT


def test_a_store_of_a_newer_schema_is_refused_with_what_to_do(tmp_path):
    path = tmp_path / "new.sqlite"
    TrajectoryStore(path).open().close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(RuntimeError, match="schema version 99.*new --store file"):
        TrajectoryStore(path).open()
