"""The engine's session KV lifecycle (`--kv-budget-tokens`): a session's keys and values retained
between its calls, released when it is closed, evicted a whole program at a time in the order
its next call is predicted, within a token budget; and the same through the engine's HTTP API
(`session_params.id`, `POST /close_session`)."""

from __future__ import annotations

import httpx
import pytest
import torch

from roost.rollout.engine.kv_cache import SlotKVCache
from roost.rollout.engine.launch import EngineProcess
from roost.tests.prometheus_samples import sample


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def cache(slots: int, budget: int | None, clock: Clock) -> SlotKVCache:
    return SlotKVCache(
        layers=1,
        slots=slots,
        kv_heads=1,
        max_len=64,
        head_dim=2,
        dtype=torch.float32,
        budget_tokens=budget,
        clock=clock,
    )


def call(kv: SlotKVCache, clock: Clock, session: str | None, prompt: list[int], *, at: float, ends: float) -> int:
    """One call of `session`: its slot taken at `at`, given back at `ends` holding `prompt`; the
    cached tokens it found."""
    clock.now = at
    slot, cached = kv.acquire(prompt, 0, session)
    clock.now = ends
    kv.release(slot, prompt, session)
    return cached


def turns(n: int) -> list[int]:
    return list(range(1, n + 1))


def test_a_session_keeps_its_prefix_while_others_come_and_go():
    clock = Clock()
    kv = cache(slots=3, budget=1000, clock=clock)
    assert call(kv, clock, "a", turns(10), at=0, ends=1) == 0
    assert (kv.retained_tokens, kv.retained_sessions) == (10, 1)
    # two other requests (one of no session) take the two free slots, not a's
    call(kv, clock, None, [50, 51, 52], at=1, ends=2)
    call(kv, clock, "b", [60, 61, 62, 63], at=2, ends=3)
    assert call(kv, clock, "a", turns(14), at=5, ends=6) == 10  # its next turn extends what it kept
    assert kv.stats.cached_tokens == 10 and kv.stats.evicted_programs == 0


def test_without_a_budget_sessions_are_not_retained():
    clock = Clock()
    kv = cache(slots=2, budget=None, clock=clock)
    call(kv, clock, "a", turns(10), at=0, ends=1)
    assert kv.retained_tokens == 0 and kv.free_slots == 2


@pytest.mark.parametrize("budget", [1000, None])
def test_the_program_predicted_to_return_last_is_evicted_not_the_least_recent(budget):
    """a's last call ended first (least recent), but a waits 1 s between calls and b 10 s: a is due
    back at 12, b at 21.5, so a new request takes b's slot; by recency alone (no budget) it takes a's."""
    clock = Clock()
    kv = cache(slots=2, budget=budget, clock=clock)
    call(kv, clock, "b", [100, 101, 102], at=0, ends=1)
    call(kv, clock, "a", turns(6), at=9, ends=9.5)
    call(kv, clock, "a", turns(8), at=10.5, ends=11)
    call(kv, clock, "b", [100, 101, 102, 103], at=11, ends=11.5)
    clock.now = 11.6
    kv.acquire([300, 301, 302], 0, None)  # no free slot: one program must go
    kept = call(kv, clock, "a", turns(10), at=12, ends=13)
    if budget is None:
        assert kept == 0
    else:
        assert kept == 8, "a, due back first, kept its prefix"
        assert (kv.stats.evicted_programs, kv.stats.evicted_tokens) == (1, 4)  # b, whole


def test_a_budget_evicts_until_the_retained_tokens_fit():
    clock = Clock()
    kv = cache(slots=4, budget=20, clock=clock)
    call(kv, clock, "a", turns(12), at=0, ends=1)
    call(kv, clock, "b", [100 + i for i in range(12)], at=0, ends=2)  # 24 > 20: the one due back last goes
    assert kv.retained_tokens <= 20 and kv.retained_sessions == 1 and kv.stats.evicted_tokens == 12


def test_closing_a_session_frees_its_slot_to_be_taken_first():
    clock = Clock()
    kv = cache(slots=2, budget=1000, clock=clock)
    call(kv, clock, "a", turns(10), at=0, ends=1)
    call(kv, clock, "b", [100 + i for i in range(6)], at=0, ends=1)
    assert kv.close("b") == 6 and kv.retained_sessions == 1 and kv.stats.closed_sessions == 1
    call(kv, clock, None, [7, 7, 7], at=2, ends=3)  # takes b's freed slot, not a's
    assert call(kv, clock, "a", turns(12), at=3, ends=4) == 10
    assert kv.stats.evicted_programs == 0


def test_an_evicted_session_counts_the_prefix_it_prefills_again():
    clock = Clock()
    kv = cache(slots=1, budget=1000, clock=clock)
    call(kv, clock, "a", turns(10), at=0, ends=1)
    call(kv, clock, None, [900, 901, 902], at=2, ends=3)  # no free slot: a is evicted, its slot overwritten
    assert kv.stats.evicted_programs == 1 and kv.stats.evicted_tokens == 10
    assert call(kv, clock, "a", turns(12), at=4, ends=5) == 0
    assert kv.stats.reprefilled_tokens == 10
    assert kv.stats.prompt_tokens == 25 and kv.stats.cached_tokens == 0


def test_new_weights_void_every_retained_prefix():
    clock = Clock()
    kv = cache(slots=2, budget=1000, clock=clock)
    call(kv, clock, "a", turns(10), at=0, ends=1)
    kv.forget()
    assert kv.retained_tokens == 0
    assert call(kv, clock, "a", turns(12), at=2, ends=3) == 0


@pytest.fixture(scope="module")
def engine_url():
    engine = EngineProcess(extra_args=["--max-running", "2", "--kv-budget-tokens", "4096"])
    with engine as url:
        yield url


def _generate(url: str, ids: list[int], session: str | None, **extra) -> httpx.Response:
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 2, "temperature": 0}, **extra}
    if session is not None:
        body["session_params"] = {"id": session}
    return httpx.post(f"{url}/generate", json=body, timeout=60)


def test_the_engine_keeps_a_session_between_calls_and_releases_it_when_closed(engine_url):
    first = _generate(engine_url, list(range(10, 60)), "episode-1").json()
    grown = list(range(10, 60)) + first["output_ids"][:1] + list(range(70, 90))
    _generate(engine_url, list(range(200, 240)), None)  # another request meanwhile, on the other slot
    _generate(engine_url, list(range(300, 340)), "episode-2")  # and another session: it takes a free slot
    again = _generate(engine_url, grown, "episode-1").json()
    assert again["meta_info"]["cached_tokens"] == 51, "the session's next call extends what it kept"
    info = httpx.get(f"{engine_url}/get_server_info").json()
    assert info["kv_budget_tokens"] == 4096 and info["kv_retained_sessions"] == 2
    closed = httpx.post(f"{engine_url}/close_session", json={"session_id": "episode-1"}).json()
    assert closed["success"] and closed["freed_tokens"] == len(grown) + 1
    metrics = httpx.get(f"{engine_url}/metrics").text
    assert sample(metrics, "roost_engine_kv_retained_sessions") == 1.0
    assert sample(metrics, "roost_engine_kv_budget_tokens") == 4096.0
    opened = httpx.post(f"{engine_url}/open_session", json={"capacity_of_str_len": 0, "session_id": "mine"})
    assert opened.json() == "mine"


def test_session_params_the_engine_does_not_take_are_refused(engine_url):
    continued = _generate(engine_url, [1, 2, 3], None, session_params={"id": "s", "rid": "r1"})
    assert continued.status_code == 400 and "session_params.rid" in continued.text
    assert _generate(engine_url, [1, 2, 3], None, session_params={"id": ""}).status_code == 400
    assert httpx.post(f"{engine_url}/close_session", json={}).status_code == 400
    assert _generate(engine_url, [1, 2, 3], "fine").status_code == 200


def test_the_gateway_names_each_calls_session_and_finishing_it_releases_the_engines_cache(engine_url, tmp_path):
    from roost.rollout.keys import bearer
    from roost.tests.rollout.gateway_helpers import new_session, say, start_gateway

    gateway = start_gateway(engine_url, tmp_path / "t.sqlite")
    try:
        session = new_session(gateway, group_id="kv")
        sid, key = session["session_id"], session["key"]
        messages = [{"role": "user", "content": "Count with me."}]
        for turn in range(2):
            answer = httpx.post(
                f"{session['base_url']}/chat/completions",
                headers=bearer(key),
                json={"model": "tiny", "messages": messages, **say(f"Number {turn}.")},
                timeout=60,
            ).json()
            messages += [answer["choices"][0]["message"], {"role": "user", "content": "Next."}]
        assert answer["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        held = httpx.get(f"{engine_url}/get_server_info").json()["kv_retained_sessions"]
        finish = httpx.post(f"{gateway.url}/sessions/{sid}/finish", json={}, headers=bearer(gateway.admin_key))
        assert finish.status_code == 200, finish.text
        after = httpx.get(f"{engine_url}/get_server_info").json()["kv_retained_sessions"]
        assert after == held - 1, "finishing the session released what the engine kept for it"
    finally:
        gateway.stop()
