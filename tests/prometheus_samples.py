"""Reading a server's `GET /metrics` answer with prometheus_client's own parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of sample `name` (e.g. `roost_env_steps_total`) with exactly `labels`, or None
    when the exposition has no such sample."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    return None
