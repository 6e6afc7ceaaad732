"""`roost.tracing`: when it is on, and that off costs nothing (the spans themselves are checked
against a real receiver in tests/agents/test_episode_tracing.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from starlette.applications import Starlette

from roost.tracing import Tracing, TracingUnavailable, wanted


@pytest.mark.parametrize(
    ("flag", "environ", "on"),
    [
        (False, {}, False),
        (True, {}, True),
        (False, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        (False, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        (False, {"OTEL_TRACES_EXPORTER": "otlp"}, True),
        (False, {"OTEL_SERVICE_NAME": "mine"}, False),  # a name alone exports nothing
        (True, {"OTEL_TRACES_EXPORTER": "none"}, False),
        (True, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"}, False),
    ],
)
def test_tracing_is_on_with_the_flag_or_the_standard_variables(flag, environ, on):
    assert wanted(flag, environ) is on


def test_off_imports_nothing_of_opentelemetry_and_changes_nothing():
    code = (
        "import sys; from roost.tracing import Tracing; from starlette.applications import Starlette\n"
        "t = Tracing.start('gateway'); app = Starlette()\n"
        "assert t.instrument_app(app) is app and not app.user_middleware and t.aiohttp_trace_configs() == []\n"
        "with t.span('x') as span: assert span is None and t.current().traceparent is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_on_a_span_carries_the_ids_it_stores_and_its_parent(monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    tracing = Tracing.start("runner")
    parent = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    try:
        with tracing.span("outer", parent=parent) as span:
            ids = tracing.current()
            assert span is not None and ids.trace_id == "ab" * 16 and ids.span_id != "cd" * 8
            assert ids.traceparent == f"00-{ids.trace_id}-{ids.span_id}-01"
        assert tracing.incoming({"traceparent": parent}) == parent
        assert tracing.incoming({"traceparent": "00-not-a-span"}) is None
        app = tracing.instrument_app(Starlette())
        assert len(app.user_middleware) == 1
    finally:
        tracing.shutdown()


def test_a_protocol_roost_cannot_export_says_what_to_set(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(TracingUnavailable, match="OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"):
        Tracing.start("gateway")
