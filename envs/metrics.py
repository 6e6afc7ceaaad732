"""Counters of one env server, rendered in the Prometheus text format for `GET /metrics`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class EnvMetrics:
    counters: Counter = field(default_factory=Counter)
    """(metric name, label string) → value."""
    seconds: Counter = field(default_factory=Counter)
    calls: Counter = field(default_factory=Counter)

    def inc(self, name: str, labels: str = "", value: float = 1) -> None:
        self.counters[(name, labels)] += value

    def observe(self, op: str, seconds: float) -> None:
        self.seconds[op] += seconds
        self.calls[op] += 1

    def render(self, gauges: dict[str, float]) -> str:
        lines = []
        for name, value in sorted(gauges.items()):
            lines += [f"# TYPE {name} gauge", f"{name} {value}"]
        typed = set()
        for (name, labels), value in sorted(self.counters.items()):
            if name not in typed:
                lines.append(f"# TYPE {name} counter")
                typed.add(name)
            lines.append(f"{name}{{{labels}}} {value}" if labels else f"{name} {value}")
        if self.calls:
            lines.append("# TYPE roost_env_op_seconds summary")
            for op in sorted(self.calls):
                lines.append(f'roost_env_op_seconds_sum{{op="{op}"}} {self.seconds[op]:.6f}')
                lines.append(f'roost_env_op_seconds_count{{op="{op}"}} {self.calls[op]}')
        return "\n".join(lines) + "\n"
