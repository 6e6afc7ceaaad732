"""The training queue is fair between sessions: one session that queued many requests delays
another's one request by at most the request running when it came. Shown by the order the work
runs in (the queue's own order, and the order a real server logs), never by timing."""

from __future__ import annotations

import asyncio
import re
import time
from functools import partial

import pytest

from roost.tinker_server.fair_queue import FairQueue

from .conftest import API_KEY, tinker_server
from .test_bad_input import _datum

tinker = pytest.importorskip("tinker")


def test_lanes_take_turns_and_keep_their_own_order():
    async def scenario() -> list[str]:
        queue, ran, gate = FairQueue(), [], asyncio.Event()

        async def work(name: str) -> str:
            if name == "a0":
                await gate.wait()  # a0 runs while the others queue up behind it
            ran.append(name)
            return name

        calls = [queue.run("A", f"a{i}", partial(work, f"a{i}")) for i in range(6)]
        calls += [queue.run("B", "b0", partial(work, "b0"))]
        calls += [queue.run("C", f"c{i}", partial(work, f"c{i}")) for i in range(2)]
        tasks = [asyncio.ensure_future(c) for c in calls]
        await asyncio.sleep(0.01)
        gate.set()
        assert [await t for t in tasks] == ["a0", "a1", "a2", "a3", "a4", "a5", "b0", "c0", "c1"]
        return ran

    assert asyncio.run(scenario()) == ["a0", "b0", "c0", "a1", "c1", "a2", "a3", "a4", "a5"]


def test_a_failing_item_fails_only_its_caller():
    async def scenario() -> None:
        queue = FairQueue()

        async def fail() -> None:
            raise ValueError("bad datum")

        async def ok() -> str:
            return "ok"

        failed, after = await asyncio.gather(queue.run("A", "x", fail), queue.run("A", "y", ok), return_exceptions=True)
        assert isinstance(failed, ValueError) and after == "ok"

    asyncio.run(scenario())


QUEUE_LINE = re.compile(r"training queue: (queued|runs) forward_backward req-\d+ of (ses-[0-9a-f]+)")


def _events(log: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in QUEUE_LINE.finditer(log)]


def _wait_for(log_file, count: int, session: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while sum(e == ("queued", session) for e in _events(log_file.read_text())) < count:
        assert time.monotonic() < deadline, f"the server did not queue {count} requests of {session}"
        time.sleep(0.05)


def test_one_session_with_many_requests_does_not_starve_another(tmp_path, tiny_model_path):
    heavy = [_datum([(7 * i + j) % 900 + 1 for j in range(128)]) for i in range(4)]
    with tinker_server(tmp_path, "--log-level", "info") as url:
        a = tinker.ServiceClient(base_url=url, api_key=API_KEY)
        b = tinker.ServiceClient(base_url=url, api_key=API_KEY)
        busy = a.create_lora_training_client(base_model="tiny", rank=4).result()
        other = b.create_lora_training_client(base_model="tiny", rank=4).result()
        lane_a, lane_b = a.holder.get_session_id(), b.holder.get_session_id()
        many = [busy.forward_backward(heavy, "cross_entropy") for _ in range(10)]
        _wait_for(tmp_path / "server.log", 10, lane_a)
        one = other.forward_backward([_datum([1, 2, 3])], "cross_entropy")
        one.result()
        [f.result() for f in many]
        a.close("success").result()
        b.close("success").result()

    events = _events((tmp_path / "server.log").read_text())
    arrived = events.index(("queued", lane_b))
    waiting = sum(e == ("queued", lane_a) for e in events[:arrived]) - sum(
        e == ("runs", lane_a) for e in events[:arrived]
    )
    ran_before = events[arrived:].index(("runs", lane_b))
    a_runs_meanwhile = sum(e == ("runs", lane_a) for e in events[arrived : arrived + ran_before])
    assert waiting >= 3, f"only {waiting} of A's requests waited when B's came: the test shows nothing"
    assert a_runs_meanwhile <= 1, f"{a_runs_meanwhile} of A's {waiting} waiting requests ran before B's one"
