"""A session's time summed from its calls' timings (`roost.rollout.store.program_times`): hand-made
calls with the sums worked out by hand; the gateway's own recorded values are checked in
test_gateway_sessions.py and test_gateway_admission.py."""

from __future__ import annotations

import pytest

from roost.rollout.store.browse_rows import CallTiming
from roost.rollout.store.program_times import ProgramTimes, program_times


def call(call_id: str, received: float, recorded: float, **timings: float) -> CallTiming:
    return CallTiming(call_id, recorded, {"total_ms": (recorded - received) * 1e3, **timings})


def test_two_agents_overlapping_then_a_tool_wait():
    times = program_times(
        [
            call("a1", 100.0, 100.5, engine_ms=400.0, held_ms=50.0, prefill_ms=100.0, decode_ms=300.0),
            call("b1", 100.3, 100.8, engine_ms=450.0, paused_ms=20.0),  # another agent, at once; no split
            call("a2", 102.0, 102.2, engine_ms=150.0, held_ms=0.0, prefill_ms=30.0, decode_ms=120.0),
        ]
    )
    # in flight: 100.0-100.8 and 102.0-102.2 (1.0 s of the 2.2 s); the 1.2 s between: tools
    assert times == ProgramTimes(
        calls=3,
        wall_ms=pytest.approx(2200.0),
        engine_ms=1000.0,
        held_ms=50.0,
        paused_ms=20.0,
        tool_ms=pytest.approx(1200.0),
        prefill_ms=130.0,
        decode_ms=420.0,
        split_calls=2,
    )


def test_a_call_inside_another_adds_no_time_and_gaps_add_up():
    times = program_times(
        [
            call("outer", 10.0, 14.0, engine_ms=3000.0),
            call("inner", 11.0, 12.0, engine_ms=900.0),  # a sub-agent's call while the outer one runs
            call("next", 15.0, 15.5, engine_ms=400.0),
            call("last", 17.0, 17.5, engine_ms=400.0),
        ]
    )
    # in flight: 10-14, 15-15.5, 17-17.5 (5 s of 7.5); tools: 14-15 and 15.5-17
    assert times.wall_ms == pytest.approx(7500.0)
    assert times.tool_ms == pytest.approx(2500.0)
    assert times.engine_ms == 4700.0 and times.held_ms == 0.0


def test_without_a_time_to_first_token_prefill_and_decode_are_left_out():
    # an SGLang engine's calls, and a pass-through call (total_ms only) and one with no timings at all
    times = program_times(
        [
            call("s", 0.0, 1.0, engine_ms=800.0, held_ms=0.0),
            call("p", 3.0, 4.0),
            CallTiming("t", 6.0, {}),
        ]
    )
    assert (times.prefill_ms, times.decode_ms, times.split_calls) == (None, None, 0)
    assert times.wall_ms == pytest.approx(6000.0) and times.tool_ms == pytest.approx(4000.0)
    assert times.engine_ms == 800.0


def test_a_session_with_no_calls_took_no_time():
    assert program_times([]) == ProgramTimes(0, 0.0, 0.0, 0.0, 0.0, 0.0, None, None, 0)
