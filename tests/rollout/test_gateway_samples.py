"""`GET /samples`: the training samples of groups, paged with an opaque cursor, from a real gateway
serving a store of many sessions (tests/rollout/sample_store.py). Every page is the same each
time its cursor is sent; the pages hold every session once, in the store's order; token ids and
logprobs come back bit for bit; bad input is a 400 or 401 that says what to send, and the gateway
goes on serving."""

from __future__ import annotations

import math
import struct

import httpx
import pytest

from roost.rollout.gateway.config import GatewayConfig
from roost.rollout.gateway.control.client import ControlPlaneError, GatewayClient
from roost.rollout.gateway.control.wire import SamplesPage, SampleView
from roost.rollout.gateway.launch import GatewayThread
from roost.rollout.keys import bearer
from roost.rollout.store.paths import group_training_sessions
from roost.rollout.store.samples import Sample
from roost.tests.rollout.sample_store import GROUPS, SESSIONS_PER_GROUP, write_sample_store


@pytest.fixture(scope="module")
def served(scripted_engine_url, tmp_path_factory):
    """(gateway, store): a gateway serving the sample store."""
    store = write_sample_store(tmp_path_factory.mktemp("samples") / "trajectories.sqlite")
    gateway = GatewayThread(GatewayConfig(engine_url=scripted_engine_url, model="tiny", store_path=store, port=0))
    with gateway:
        yield gateway, store


def _get(served, admin: bool = True, **params) -> httpx.Response:
    gateway, _ = served
    headers = bearer(gateway.admin_key) if admin else {}
    return httpx.get(f"{gateway.url}/samples", params=params, headers=headers, timeout=30)


def _bits(values) -> list[bytes]:
    return [struct.pack("<d", v) if v is not None else b"none" for v in values]


def _pages(served, groups: list[str], limit: int) -> list[httpx.Response]:
    pages, cursor = [], None
    while True:
        answer = _get(served, group=groups, limit=limit, **({"cursor": cursor} if cursor else {}))
        assert answer.status_code == 200, answer.text
        pages.append(answer)
        cursor = answer.json()["next_cursor"]
        if cursor is None:
            return pages


@pytest.mark.parametrize("limit", [1, 2, 3, 8, 256])
def test_pages_hold_every_session_once_in_the_stores_order_and_repeat_exactly(served, limit):
    _, store = served
    expected = [s.session_id for s in group_training_sessions(store, GROUPS)]
    pages = _pages(served, GROUPS, limit)
    got = [s["session_id"] for p in pages for s in p.json()["sessions"]]
    assert got == expected and len(got) == len(GROUPS) * SESSIONS_PER_GROUP
    assert all(len(p.json()["sessions"]) <= limit for p in pages)
    assert len(pages) >= math.ceil(len(expected) / limit)
    # a client that lost page 2 asks again from the cursor page 1 gave: the same bytes come back
    if len(pages) > 1:
        again = _get(served, group=GROUPS, limit=limit, cursor=pages[0].json()["next_cursor"])
        assert again.content == pages[1].content


def test_samples_come_back_as_the_store_built_them_bit_for_bit(served):
    _, store = served
    from_file = group_training_sessions(store, GROUPS)
    pages = [SamplesPage.model_validate_json(p.content) for p in _pages(served, GROUPS, 4)]
    over_api = [s.session_samples() for p in pages for s in p.sessions]
    assert over_api == from_file  # every field: samples, outcomes, refused calls
    floats = sum(len(x.rollout_logprobs) for s in from_file for x in s.samples)
    assert floats > 100
    for api, file in zip(over_api, from_file):
        for a, f in zip(api.samples, file.samples):
            assert _bits(a.rollout_logprobs) == _bits(f.rollout_logprobs)  # -0.0 and subnormals too
            assert _bits(a.advantages or []) == _bits(f.advantages or [])
            assert a.tokens == f.tokens and all(type(t) is int for t in a.tokens)


def test_a_non_finite_logprob_reads_back_as_the_same_float():
    # JSON has no -inf; orjson would write null. The wire writes it as a string and reads it back.
    sample = Sample.from_turns([([1, 2], [3, 4], [-1e-300, -2.5])], session_id="s", group_id="g")
    sample.rollout_logprobs[0] = -math.inf  # a context token's: recorded, never trained on
    text = SampleView.of(sample).model_dump_json()
    assert '"-Infinity"' in text
    assert _bits(SampleView.model_validate_json(text).sample().rollout_logprobs) == _bits(sample.rollout_logprobs)


def test_an_unknown_group_is_an_empty_last_page_as_on_get_sessions(served):
    answer = _get(served, group="no-such-group")
    assert answer.status_code == 200 and answer.json() == {"sessions": [], "next_cursor": None}
    mixed = _pages(served, ["no-such-group", GROUPS[1]], 3)
    assert [s["group_id"] for p in mixed for s in p.json()["sessions"]] == [GROUPS[1]] * SESSIONS_PER_GROUP


def _cursor(served) -> str:
    return _get(served, group=GROUPS, limit=2).json()["next_cursor"]


@pytest.mark.parametrize(
    "params, needle",
    [
        ({}, "group=<group id>"),
        ({"group": GROUPS, "limit": "0"}, "from 1 to 256"),
        ({"group": GROUPS, "limit": "257"}, "from 1 to 256"),
        ({"group": GROUPS, "limit": "two"}, "whole number"),
        ({"group": GROUPS, "cursor": "%%%not base64%%%"}, "malformed"),
        ({"group": GROUPS, "cursor": "abc.def"}, "not one this gateway issued"),
    ],
)
def test_bad_queries_are_400s_that_say_what_to_send(served, params, needle):
    answer = _get(served, **params)
    assert answer.status_code == 400 and needle in answer.json()["error"]["message"], answer.text
    assert _get(served, group=GROUPS[0]).status_code == 200  # the gateway goes on serving


def test_a_forged_or_borrowed_cursor_is_refused(served):
    payload, mac = _cursor(served).split(".")
    forged = ("A" if payload[0] != "A" else "B") + payload[1:]
    answer = _get(served, group=GROUPS, cursor=f"{forged}.{mac}")
    assert answer.status_code == 400 and "signature does not match" in answer.text
    borrowed = _get(served, group=GROUPS[:2], cursor=f"{payload}.{mac}")  # issued for other groups
    assert borrowed.status_code == 400 and "issued for other groups" in borrowed.text
    assert answer.json()["error"]["param"] == "cursor"


def test_samples_need_the_admin_key(served):
    gateway, _ = served
    assert _get(served, admin=False, group=GROUPS).status_code == 401
    session = httpx.post(f"{gateway.url}/sessions", json={}, headers=bearer(gateway.admin_key)).json()
    wrong = httpx.get(f"{gateway.url}/samples", params={"group": GROUPS}, headers=bearer(session["key"]))
    assert wrong.status_code == 401 and "admin key" in wrong.text


async def test_the_client_pages_through_and_says_what_the_gateway_refused(served):
    gateway, store = served
    async with GatewayClient(gateway.url, admin_key=gateway.admin_key) as client:
        got = [s async for s in client.training_sessions(GROUPS, page_size=5)]
        assert got == group_training_sessions(store, GROUPS)
        with pytest.raises(ControlPlaneError, match="400.*from 1 to 256"):
            await client.samples_page(GROUPS, limit=1000)


def test_recorded_routing_crosses_the_wire():
    """R3: each token's recorded experts travel with the sample (an empty row: none recorded)."""
    sample = Sample.from_turns([([1, 2], [3, 4], [-0.5, -1.5])], session_id="s", group_id="g")
    sample.routed_experts = [[0, 5, 2, 7], [1, 1, 3, 4], [6, 0, 2, 2], []]
    back = SampleView.model_validate_json(SampleView.of(sample).model_dump_json()).sample()
    assert back == sample
