"""Prometheus metrics, kept per gateway instance (no global registry).

A small implementation rather than prometheus_client: the gateway needs counters, one
gauge kind and fixed-bucket histograms, and text exposition; keeping them as plain
objects on the gateway lets several gateways live in one process (tests) without clashes.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def _labels(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    if not names:
        return ""
    inner = ",".join(f'{n}="{_escape(v)}"' for n, v in zip(names, values))
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Counter:
    def __init__(self, name: str, help: str, labels: tuple[str, ...] = ()):
        self.name, self.help, self.label_names = name, help, labels
        self.values: dict[tuple[str, ...], float] = {}

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def get(self, *labels: str) -> float:
        return self.values.get(labels, 0.0)

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]
        for labels, value in sorted(self.values.items()):
            lines.append(f"{self.name}{_labels(self.label_names, labels)} {value:g}")
        return lines


class Gauge:
    """A gauge whose value is read when scraped."""

    def __init__(self, name: str, help: str, read: Callable[[], float]):
        self.name, self.help, self.read = name, help, read

    def render(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} gauge", f"{self.name} {self.read():g}"]


class Histogram:
    def __init__(self, name: str, help: str, labels: tuple[str, ...] = (), buckets: tuple[float, ...] = LATENCY_BUCKETS):
        self.name, self.help, self.label_names, self.buckets = name, help, labels, buckets
        self.series: dict[tuple[str, ...], list] = {}  # labels -> [bucket counts..., sum, count]

    def observe(self, value: float, *labels: str) -> None:
        series = self.series.get(labels)
        if series is None:
            series = self.series[labels] = [0] * len(self.buckets) + [0.0, 0]
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.buckets):
            series[index] += 1
        series[-2] += value
        series[-1] += 1

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        for labels, series in sorted(self.series.items()):
            cumulative = 0
            for bound, count in zip(self.buckets, series):
                cumulative += count
                names = self.label_names + ("le",)
                lines.append(f"{self.name}_bucket{_labels(names, labels + (f'{bound:g}',))} {cumulative}")
            names = self.label_names + ("le",)
            lines.append(f"{self.name}_bucket{_labels(names, labels + ('+Inf',))} {series[-1]}")
            lines.append(f"{self.name}_sum{_labels(self.label_names, labels)} {series[-2]:g}")
            lines.append(f"{self.name}_count{_labels(self.label_names, labels)} {series[-1]}")
        return lines


class GatewayMetrics:
    def __init__(self) -> None:
        self.requests = Counter("roost_gateway_requests_total", "HTTP requests answered", ("endpoint", "status"))
        self.calls = Counter("roost_gateway_calls_total", "Model calls recorded", ("endpoint", "kind", "reuse"))
        self.latency = Histogram("roost_gateway_request_seconds", "Model call latency, end to end", ("endpoint",))
        self.overhead = Histogram("roost_gateway_overhead_seconds", "Model call latency minus engine time", ("endpoint",))
        self.engine_latency = Histogram("roost_gateway_engine_seconds", "Engine time per call", ("endpoint",))
        self.engine_errors = Counter("roost_gateway_engine_errors_total", "Engine failures by kind", ("code",))
        self.calls_aborted = Counter("roost_gateway_calls_aborted_total",
                                     "Model calls whose client disconnected before the answer was complete",
                                     ("endpoint",))
        self.tool_parse_failures = Counter("roost_gateway_tool_parse_failures_total",
                                           "Tool-call blocks that did not parse (returned as content)")
        self.reasoning_mismatches = Counter("roost_gateway_rerender_mismatch_total",
                                            "Continuations the chat template does not re-render exactly", ("policy",))
        self.prompt_tokens = Counter("roost_gateway_prompt_tokens_total", "Prompt tokens sent to the engine")
        self.reused_tokens = Counter("roost_gateway_reused_prompt_tokens_total", "Prompt tokens reused verbatim")
        self.completion_tokens = Counter("roost_gateway_completion_tokens_total", "Tokens sampled")
        self._gauges: list[Gauge] = []

    def gauge(self, name: str, help: str, read: Callable[[], float]) -> None:
        self._gauges.append(Gauge(name, help, read))

    def render(self) -> str:
        lines: list[str] = []
        for metric in (self.requests, self.calls, self.latency, self.overhead, self.engine_latency,
                       self.engine_errors, self.calls_aborted, self.tool_parse_failures, self.reasoning_mismatches,
                       self.prompt_tokens, self.reused_tokens, self.completion_tokens, *self._gauges):
            lines.extend(metric.render())
        return "\n".join(lines) + "\n"
