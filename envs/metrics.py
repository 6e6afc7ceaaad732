"""The env server's Prometheus metrics, in one registry per server (`roost.metrics_http`):
`EpisodeManager` counts into them and `GET /metrics` exposes them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from roost.metrics_http import ReadAtScrape, Reading

OP_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0)


class EnvMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()

        def counter(name: str, help: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, help, labels, registry=r)

        self.episodes_started = counter("roost_env_episodes_started_total", "Episodes reset")
        self.episodes_ended = counter("roost_env_episodes_ended_total", "Episodes ended, by final state", ("state",))
        self.steps = counter("roost_env_steps_total", "Steps taken")
        self.invalid_actions = counter("roost_env_invalid_actions_total", "Actions refused as invalid")
        self.errors = counter("roost_env_errors_total", "Env faults, by kind (env_error, worker_crashed)", ("type",))
        self.capacity_rejections = counter("roost_env_capacity_rejections_total", "Resets refused at max_episodes")
        self.reaped = counter("roost_env_reaped_total", "Episodes closed after their lease expired")
        self.worker_restarts = counter("roost_env_worker_restarts_total", "Env workers replaced")
        self.op_seconds = Histogram(
            "roost_env_op_seconds", "Time of one env operation (reset, step)", ("op",), buckets=OP_BUCKETS, registry=r
        )

    def read_at_scrape(self, readings: list[Reading]) -> None:
        """Values the manager owns (live episodes, workers), read when scraped."""
        self.registry.register(ReadAtScrape(readings))
