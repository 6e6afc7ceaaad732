"""Where a program's time went: one session's calls' recorded timings, summed.

    times = program_times(reader.calls(session_id))   # GET /sessions/{sid} `program`, the viewer

A call is in flight from when the gateway received it to when it was recorded: `created_at`
less its `total_ms`. Inside that, `held_ms` waited for program-aware admission, `engine_ms` ran on
the engine (`prefill_ms` to the first token, `decode_ms` after it, where the engine said) and
`paused_ms` waited while the gateway was paused for a weight update. The
rest of the session's span, from its first call received to its last one recorded, had no call of
any of its agents in flight: the harness was running tools (or the env, or itself), `tool_ms`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class TimedCall(Protocol):
    """What the summary reads of a call: a `CallRecord`, or the viewer's `CallTiming`."""

    @property
    def created_at(self) -> float: ...

    @property
    def timings(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class ProgramTimes:
    """A session's time in milliseconds; the sums cover the calls that recorded each part."""

    calls: int
    wall_ms: float
    """From the first call received to the last call recorded."""
    engine_ms: float
    held_ms: float
    paused_ms: float
    """Waiting while the gateway was paused (a weight update)."""
    tool_ms: float
    """Inside `wall_ms`, with no call of the session in flight."""
    prefill_ms: float | None
    """None when no call knows its time to first token (an SGLang or vLLM engine)."""
    decode_ms: float | None
    split_calls: int
    """The calls whose `engine_ms` splits into prefill and decode (the others' is in neither)."""


def program_times(calls: Iterable[TimedCall]) -> ProgramTimes:
    calls = list(calls)
    spans = [_in_flight(c) for c in calls]
    wall_s = max(end for _, end in spans) - min(start for start, _ in spans) if spans else 0.0
    split = [c.timings for c in calls if "prefill_ms" in c.timings]
    return ProgramTimes(
        calls=len(calls),
        wall_ms=wall_s * 1e3,
        engine_ms=_sum(calls, "engine_ms"),
        held_ms=_sum(calls, "held_ms"),
        paused_ms=_sum(calls, "paused_ms"),
        tool_ms=(wall_s - _covered_s(spans)) * 1e3,
        prefill_ms=sum(t["prefill_ms"] for t in split) if split else None,
        decode_ms=sum(t["decode_ms"] for t in split) if split else None,
        split_calls=len(split),
    )


def _in_flight(call: TimedCall) -> tuple[float, float]:
    """(received, recorded) in wall-clock seconds; a call with no `total_ms` (a store written
    without it) is an instant."""
    return call.created_at - call.timings.get("total_ms", 0.0) / 1e3, call.created_at


def _covered_s(spans: list[tuple[float, float]]) -> float:
    """The length of the union of the intervals: agents' calls may overlap."""
    covered, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            covered += end - max(start, reach)
            reach = end
    return covered


def _sum(calls: list[TimedCall], key: str) -> float:
    return float(sum(c.timings.get(key, 0.0) for c in calls))
