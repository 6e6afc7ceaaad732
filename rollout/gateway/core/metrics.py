"""The gateway's Prometheus metrics: prometheus_client objects in one registry per gateway
(`roost.metrics_http`), so several gateways in one process (tests) count apart."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram

from roost.metrics_http import ReadAtScrape, Reading

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()

        def histogram(name: str, help: str) -> Histogram:
            return Histogram(name, help, ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)

        self.requests = Counter(
            "roost_gateway_requests_total", "HTTP requests answered", ["endpoint", "status"], registry=r
        )
        self.calls = Counter(
            "roost_gateway_calls_total", "Model calls recorded", ["endpoint", "kind", "reuse"], registry=r
        )
        self.latency = histogram("roost_gateway_request_seconds", "Model call latency, end to end")
        self.overhead = histogram("roost_gateway_overhead_seconds", "Model call latency minus engine time")
        self.engine_latency = histogram("roost_gateway_engine_seconds", "Engine time per call")
        self.engine_errors = Counter(
            "roost_gateway_engine_errors_total", "Engine failures by kind", ["code"], registry=r
        )
        self.calls_aborted = Counter(
            "roost_gateway_calls_aborted_total",
            "Model calls whose client disconnected before the answer was complete",
            ["endpoint"],
            registry=r,
        )
        self.admissions = Counter(
            "roost_gateway_admissions_total",
            "Admission outcomes: first calls admitted, deferred or let_through; running programs paused and resumed",
            ["outcome"],
            registry=r,
        )
        self.tool_parse_failures = Counter(
            "roost_gateway_tool_parse_failures_total",
            "Tool-call blocks that did not parse (returned as content)",
            registry=r,
        )
        self.reasoning_mismatches = Counter(
            "roost_gateway_rerender_mismatch_total",
            "Continuations the chat template does not re-render exactly",
            ["policy"],
            registry=r,
        )
        self.prompt_tokens = Counter(
            "roost_gateway_prompt_tokens_total", "Prompt tokens sent to the engine", registry=r
        )
        self.reused_tokens = Counter(
            "roost_gateway_reused_prompt_tokens_total", "Prompt tokens reused verbatim", registry=r
        )
        self.completion_tokens = Counter("roost_gateway_completion_tokens_total", "Tokens sampled", registry=r)
        self._read = ReadAtScrape()
        r.register(self._read)

    def gauge(self, name: str, help: str, read: Callable[[], float]) -> None:
        """A gauge whose value `read` returns when scraped."""
        self._read.readings.append(Reading(name, help, read))
