"""One answer from every worker's: `/health` and `/metrics` of the relay."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from roost.rollout.gateway.control.wire import GatewayHealth, WorkerHealth
from roost.rollout.gateway.workers.supervisor import WorkerSlot


def merged_health(answers: list[tuple[WorkerSlot, dict[str, Any] | None]]) -> tuple[GatewayHealth, int]:
    """From each worker's slot and /health body (None when down or not answering): the relay's
    health and its status code; `ok` (200) only while every worker is."""
    workers = [
        WorkerHealth(
            index=slot.index,
            pid=slot.pid,
            url=slot.url,
            restarts=slot.restarts,
            status=body.get("status", "degraded") if body is not None else "down",
        )
        for slot, body in answers
    ]
    bodies = [body for _, body in answers if body]
    first = bodies[0] if bodies else {}
    up = bool(answers) and all(w.status == "ok" for w in workers)
    health = GatewayHealth(
        status="ok" if up else "degraded",
        engine=first.get("engine", "unreachable"),
        paused=any(b.get("paused", False) for b in bodies),
        backend=first.get("backend", "?"),
        model=first.get("model"),
        in_flight=sum(int(b.get("in_flight", 0)) for b in bodies),
        workers=workers,
    )
    return health, 200 if up else 503


class _Families:
    """A collector that yields metric families already read (for `generate_latest`)."""

    def __init__(self, families: list[Metric]):
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def merged_metrics(texts: list[tuple[int, str]]) -> bytes:
    """Every worker's Prometheus text as one, each sample labelled with its `worker` index."""
    families: dict[str, Metric] = {}
    for index, text in texts:
        for family in text_string_to_metric_families(text):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
            merged.samples.extend(
                Sample(s.name, {**s.labels, "worker": str(index)}, s.value, s.timestamp, s.exemplar)
                for s in family.samples
            )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(list(families.values())))  # type: ignore[arg-type]
    return generate_latest(registry)
