"""`roost bench viewer`: page times of the trajectory viewer on a large generated store.

Builds a store of `calls` calls (sessions of `calls_per_session` calls, groups of `group_size`
sessions, 64 prompt and 16 sampled tokens a call, rewards and advantages on every session), then
times each page through the viewer's ASGI app in-process (the median of 5 requests), and the
first request after opening, which includes the store's schema check.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

from roost.outcome import EpisodeOutcome, RewardSource, SessionStatus
from roost.rollout.store import schema
from roost.rollout.store.records import CallRecord, SessionRecord
from roost.rollout.store.rows import INSERT_CALL, INSERT_SESSION, call_row, session_row

REPEATS = 5


def build_store(path: Path, calls: int, calls_per_session: int, group_size: int) -> list[str]:
    """Write the store; returns the session ids."""
    conn = schema.connect(str(path))
    schema.create(conn)
    sessions = [f"s{i:07d}" for i in range(max(1, calls // calls_per_session))]
    conn.execute("BEGIN")
    for i, sid in enumerate(sessions):
        group = group_name(i // group_size)
        record = SessionRecord(
            sid,
            f"k{sid}",
            group,
            {"task_id": "t"},
            {},
            "keep",
            SessionStatus.FINISHED,
            float(i),
            float(i) + 1,
            EpisodeOutcome(reward=float(i % 2), reward_source=RewardSource.ENV),
        )
        conn.execute(INSERT_SESSION, session_row(record))
        conn.executemany(
            INSERT_CALL, [call_row(_call(sid, seq, version=i // (group_size * 4))) for seq in range(calls_per_session)]
        )
        conn.execute(
            "INSERT INTO rewards(session_id, reward, info, created_at) VALUES (?, ?, '{}', ?)",
            (sid, float(i % 2), float(i)),
        )
        conn.execute(
            "INSERT INTO advantages(call_id, session_id, value, created_at) VALUES (?, ?, ?, ?)",
            (f"{sid}-c0", sid, 0.5 - i % 2, float(i)),
        )
    conn.execute("COMMIT")
    conn.close()
    return sessions


def group_name(index: int) -> str:
    return f"b{index // 4}-g{index}"  # four groups a step, as a run with groups_per_step=4 names them


def _call(sid: str, seq: int, *, version: int) -> CallRecord:
    prompt = array("i", range(seq * 80, seq * 80 + 64))
    return CallRecord(
        call_id=f"{sid}-c{seq}",
        session_id=sid,
        agent_id="main",
        parent_agent=None,
        seq=seq,
        endpoint="chat",
        backend="embedded",
        model="bench",
        parent_call_id=f"{sid}-c{seq - 1}" if seq else None,
        shared_prefix_len=seq * 80,
        kind="extend" if seq else "root",
        reuse="exact",
        prompt_ids=prompt,
        sampled_ids=array("i", range(16)),
        sampled_logprobs=array("d", [-0.5] * 16),
        finish_reason={"type": "stop"},
        sampling_params={},
        weight_version=str(version),
        timings={},
        request={"messages": [{"role": "user", "content": f"turn {seq}"}]},
        response={"message": {"role": "assistant", "content": "go north"}},
        created_at=float(seq),
    )


def run_bench(calls: int, calls_per_session: int, group_size: int) -> dict[str, Any]:
    from fastapi.testclient import TestClient

    from roost.viewer.app import ViewerConfig, build_app

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trajectories.sqlite"
        started = time.perf_counter()
        sessions = build_store(path, calls, calls_per_session, group_size)
        build_s = time.perf_counter() - started
        size_mb = path.stat().st_size / 2**20
        last, groups = sessions[-1], -(-len(sessions) // group_size)
        urls = {
            "run": "/",
            "groups": "/groups",
            "groups_last_page": f"/groups?offset={max(0, groups - 10)}",
            "step_groups": "/groups?version=1",
            "group": f"/group?id={group_name(groups - 1)}",
            "session": f"/sessions/{last}",
            "call": f"/calls/{last}-c{calls_per_session - 1}",
        }
        with TestClient(build_app(ViewerConfig(store=path))) as client:
            opened = _time(client, "/")
            pages = {name: statistics.median(_time(client, url) for _ in range(REPEATS)) for name, url in urls.items()}
    return {
        "calls": calls,
        "sessions": len(sessions),
        "groups": groups,
        "store_mb": round(size_mb, 1),
        "build_s": round(build_s, 2),
        "first_page_ms": round(opened, 1),
        "pages_ms": {k: round(v, 1) for k, v in pages.items()},
    }


def _time(client: Any, url: str) -> float:
    started = time.perf_counter()
    response = client.get(url)
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"GET {url} answered {response.status_code}: {response.text[:300]}")
    return elapsed
