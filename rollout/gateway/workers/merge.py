"""One answer from every worker's: `/health` and `/metrics` of the relay."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from roost.rollout.gateway.control.wire import AdmissionState, GatewayHealth, WorkerHealth
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
        admission=_summed_admission([b["admission"] for b in bodies if b.get("admission")]),
    )
    return health, 200 if up else 503


def _summed_admission(states: list[dict[str, Any]]) -> AdmissionState | None:
    """The workers' admission states as one: counts and budgets summed (each worker admits
    against its share); the expected size is the largest a worker expects."""
    if not states:
        return None
    parts = [AdmissionState.model_validate(s) for s in states]

    def total(name: str) -> int | None:
        values = [getattr(p, name) for p in parts]
        return None if any(v is None for v in values) else sum(values)

    return AdmissionState(
        programs_running=sum(p.programs_running for p in parts),
        programs_waiting=sum(p.programs_waiting for p in parts),
        held_tokens=sum(p.held_tokens for p in parts),
        expected_tokens=max(p.expected_tokens for p in parts),
        capacity_programs=total("capacity_programs"),
        capacity_tokens=total("capacity_tokens"),
        room=total("room"),
    )


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
