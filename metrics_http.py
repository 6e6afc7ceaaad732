"""Prometheus metrics of a roost server: what every server's `GET /metrics` shares.

Each server (gateway, engine, env server) owns one `prometheus_client.CollectorRegistry`,
made when the server is built, never the library's global default registry: two servers in
one process (tests, `roost eval` with an in-process env server) keep their own counts.

    registry = CollectorRegistry()
    calls = Counter("roost_x_calls_total", "Calls answered", ["status"], registry=registry)
    registry.register(ReadAtScrape([Reading("roost_x_queue", "Requests waiting", lambda: len(queue))]))
    return metrics_response(registry, request)   # in the /metrics route
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from starlette.requests import Request
from starlette.responses import Response


@dataclass(frozen=True)
class Reading:
    """A value another object owns (a scheduler's queue, a worker pool's size), read when scraped."""

    name: str
    help: str
    read: Callable[[], float]
    kind: Literal["gauge", "counter"] = "gauge"


@dataclass(eq=False)  # a registry keys its collectors by identity
class ReadAtScrape(Collector):
    """Exposes `Reading`s; readings added after registering show from the next scrape on."""

    readings: list[Reading] = field(default_factory=list)

    def collect(self) -> Iterator[Metric]:
        for reading in self.readings:
            family = CounterMetricFamily if reading.kind == "counter" else GaugeMetricFamily
            yield family(reading.name, reading.help, value=float(reading.read()))


def metrics_response(registry: CollectorRegistry, request: Request) -> Response:
    """The registry in the format the scraper asks for: Prometheus text by default, OpenMetrics
    when its Accept header names it (as Prometheus itself does)."""
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encode(registry), media_type=content_type)
