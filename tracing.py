"""OpenTelemetry tracing for roost's servers, runner and trainer: off unless asked for.

    tracing = Tracing.start("gateway", flag=config.trace)   # off: nothing of OpenTelemetry is imported
    app = tracing.instrument_app(app)                         # a server span per request, traceparent read
    tracing.instrument_httpx(client)                          # client spans, traceparent sent
    with tracing.span("gateway.plan", {"roost.session_id": sid}): ...
    tracing.shutdown()                                        # flush the spans still queued

On with `flag` (`--trace`, a recipe's `trace: true`) or the standard variables:
OTEL_TRACES_EXPORTER=otlp (or console), or OTEL_EXPORTER_OTLP_ENDPOINT /
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set. OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true keep
it off whatever else says. Spans go over OTLP/HTTP (protobuf) to the endpoint the exporter reads
from those variables (default http://localhost:4318/v1/traces); OTEL_SERVICE_NAME names the
service (default `roost-<part>`). W3C `traceparent` carries the context across every HTTP hop.

Each part that traces holds its own `Tracing` (its own tracer provider) and passes it down:
nothing is installed process-wide, so a test may run a gateway, an env server and a runner in
one process, each with its own.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# Health and metrics probes would bury the spans that matter.
UNTRACED_PATHS = "/health,/health_generate,/metrics"
TRUE = ("1", "true", "yes", "on")


class TracingUnavailable(RuntimeError):
    """Tracing was asked for but OpenTelemetry is not installed, or asked for what roost cannot export."""


@dataclass(frozen=True)
class TraceIds:
    """A span's ids as W3C writes them: 32 and 16 lowercase hex digits ("" when not traced)."""

    trace_id: str = ""
    span_id: str = ""

    @property
    def traceparent(self) -> str | None:
        return f"00-{self.trace_id}-{self.span_id}-01" if self.trace_id else None


def wanted(flag: bool = False, environ: Mapping[str, str] | None = None) -> bool:
    """Whether tracing is on: the flag or the OTEL_* variables ask, and neither variable forbids it."""
    env = os.environ if environ is None else environ
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() in TRUE or exporter == "none":
        return False
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    return flag or bool(exporter) or bool(endpoint)


class Tracing:
    """One part's tracer (and its exporter), or nothing: every method is a no-op when off."""

    def __init__(self, provider: Any = None, service: str = "") -> None:
        self.provider = provider
        self.service = service
        self._tracer = provider.get_tracer("roost") if provider is not None else None

    @classmethod
    def start(cls, part: str, *, flag: bool = False) -> Tracing:
        """The tracing of one part (`gateway`, `engine`, `env`, `runner`, `trainer`): on when
        `wanted(flag)`, else off without importing OpenTelemetry."""
        if not wanted(flag):
            return cls()
        return cls(_provider(part), os.environ.get("OTEL_SERVICE_NAME") or f"roost-{part}")

    @property
    def on(self) -> bool:
        return self._tracer is not None

    @contextlib.contextmanager
    def span(
        self,
        name: str,
        attributes: Mapping[str, Any] | None = None,
        *,
        parent: str | None = None,
        link: str | None = None,
        server: bool = False,
    ) -> Iterator[Any]:
        """A span around the block, a child of the current span, or of `parent` (a traceparent)
        when given; `link` (a traceparent) adds a link to another span; `server`: it serves a
        request. Yields the span (None when off)."""
        if self._tracer is None:
            yield None
            return
        from opentelemetry import trace

        context = _context_of(parent) if parent else None
        links = [trace.Link(_span_context_of(link))] if link and _span_context_of(link).is_valid else None
        kind = trace.SpanKind.SERVER if server else trace.SpanKind.INTERNAL
        with self._tracer.start_as_current_span(
            name, context=context, kind=kind, links=links, attributes=_attributes(attributes)
        ) as span:
            yield span

    def current(self) -> TraceIds:
        """The ids of the current span (of any part of this process); empty when off or outside one."""
        if self._tracer is None:
            return TraceIds()
        from opentelemetry import trace

        context = trace.get_current_span().get_span_context()
        if not context.is_valid:
            return TraceIds()
        return TraceIds(trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id))

    def incoming(self, headers: Mapping[str, str]) -> str | None:
        """The `traceparent` a request brought, when it is a valid one."""
        if self._tracer is None:
            return None
        value = headers.get("traceparent")
        return value if value and _span_context_of(value).is_valid else None

    def instrument_app(self, app: Any, *, untraced: str = "") -> Any:
        """Server spans for an ASGI app (FastAPI or Starlette), named by route, parented on the
        request's `traceparent`; probes, and the URLs matching `untraced` (comma-separated
        regular expressions), untraced. Returns the app."""
        if self._tracer is None:
            return app
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

        excluded = ",".join(p for p in (UNTRACED_PATHS, untraced) if p)
        app.add_middleware(
            OpenTelemetryMiddleware,
            tracer_provider=self.provider,
            excluded_urls=excluded,
            default_span_details=_route_span_details,
            exclude_spans=["receive", "send"],
        )
        return app

    def instrument_httpx(self, client: Any) -> Any:
        """Client spans and `traceparent` on every request of an httpx client. Returns the client."""
        if self._tracer is not None:
            from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

            HTTPXClientInstrumentor.instrument_client(client, tracer_provider=self.provider)
        return client

    def aiohttp_trace_configs(self) -> list[Any]:
        """`trace_configs` for an aiohttp `ClientSession`: client spans and `traceparent`."""
        if self._tracer is None:
            return []
        from opentelemetry.instrumentation.aiohttp_client import create_trace_config

        return [create_trace_config(tracer_provider=self.provider)]

    def flush(self) -> None:
        """Export what is queued now (a process about to be killed)."""
        if self.provider is not None:
            self.provider.force_flush()

    def shutdown(self) -> None:
        """Export what is queued and stop the exporter."""
        if self.provider is not None:
            self.provider.shutdown()


def _provider(part: str) -> Any:
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise TracingUnavailable(
            f"tracing is on (--trace or OTEL_* variables) but OpenTelemetry is not installed ({exc}); "
            "install roost's `tracing` extra (pip install 'roost[tracing]') or unset OTEL_TRACES_EXPORTER "
            "and OTEL_EXPORTER_OTLP_ENDPOINT"
        ) from exc
    service = os.environ.get("OTEL_SERVICE_NAME") or f"roost-{part}"
    provider = TracerProvider(
        resource=Resource.create({"service.name": service, "service.namespace": "roost", "roost.part": part})
    )
    provider.add_span_processor(BatchSpanProcessor(_exporter()))
    return provider


def _exporter() -> Any:
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if kind != "otlp" or protocol != "http/protobuf":
        raise TracingUnavailable(
            f"OTEL_TRACES_EXPORTER={kind} with protocol {protocol}: roost exports traces over OTLP/HTTP "
            "(protobuf) or to the console; set OTEL_TRACES_EXPORTER=otlp (or console) and "
            "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf, with the receiver's HTTP port (4318)"
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def _span_context_of(traceparent: str) -> Any:
    from opentelemetry import trace

    return trace.get_current_span(_context_of(traceparent)).get_span_context()


def _context_of(traceparent: str) -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


def _attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any] | None:
    # OpenTelemetry takes str, bool, int, float (and lists of them); None is dropped.
    if not attributes:
        return None
    return {k: v if isinstance(v, (str, bool, int, float)) else str(v) for k, v in attributes.items() if v is not None}


def _route_span_details(scope: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """`POST /sessions/{sid}/v1/chat/completions`: the route's template, not the path with its ids."""
    from starlette.routing import Match

    method = scope.get("method", "HTTP")
    for route in getattr(scope.get("app"), "routes", ()):
        match, _ = route.matches(scope)
        if match is Match.FULL and hasattr(route, "path"):
            return f"{method} {route.path}", {"http.route": route.path}
    return f"{method} {scope.get('path', '')}", {}
