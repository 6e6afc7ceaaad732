"""Links from a call's page to its trace in a tracing UI (Jaeger, Phoenix, Tempo, ...)."""

from __future__ import annotations

import re
import string


def check_trace_url(template: str) -> None:
    """Refuse a trace link template that is not an http(s) URL with exactly the `{trace_id}` field."""
    hint = (
        "give an http(s) URL with {trace_id} where the trace id goes (Jaeger: http://127.0.0.1:16686/trace/{trace_id})"
    )
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ValueError(f"trace URL {template!r} is not a template ({exc}): {hint}") from None
    if fields != {"trace_id"} or not template.startswith(("http://", "https://")):
        raise ValueError(f"trace URL {template!r}: {hint}")


def trace_link(template: str | None, trace_id: str) -> str | None:
    """The call's trace URL, only for a well-formed W3C trace id (32 lower-case hex digits)."""
    if template is None or not re.fullmatch(r"[0-9a-f]{32}", trace_id):
        return None
    return template.format(trace_id=trace_id)
