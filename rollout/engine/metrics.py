"""The embedded engine's Prometheus metrics, in one registry per server (`roost.metrics_http`):
what `/generate` answered, counted by the server, and the scheduler's own state, read when
scraped. Names follow SGLang's (`sglang:prompt_tokens_total` is `roost_engine_prompt_tokens_total`)."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram

from roost.metrics_http import ReadAtScrape, Reading
from roost.rollout.engine.engine import Completion, Engine
from roost.rollout.engine.sessions import SessionTable

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class EngineMetrics:
    def __init__(self, engine: Engine, sessions: SessionTable) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter(
            "roost_engine_requests_total", "Generate requests answered, by finish reason", ["finish"], registry=r
        )
        self.prompt_tokens = Counter(
            "roost_engine_prompt_tokens_total", "Prompt tokens of answered requests", registry=r
        )
        self.cached_tokens = Counter(
            "roost_engine_cached_tokens_total",
            "Prompt tokens whose keys and values came from the prefix cache",
            registry=r,
        )
        self.completion_tokens = Counter("roost_engine_completion_tokens_total", "Tokens sampled", registry=r)
        self.latency = Histogram(
            "roost_engine_request_seconds", "Generate time, end to end", buckets=LATENCY_BUCKETS, registry=r
        )
        r.register(ReadAtScrape(_scheduler_readings(engine) + _session_readings(sessions)))

    def answered(self, prompt_len: int, done: Completion, started: float) -> None:
        """Count a finished generate request (`started`: its time.perf_counter() on arrival)."""
        self.requests.labels((done.finish_reason or {}).get("type", "unknown")).inc()
        self.prompt_tokens.inc(prompt_len)
        self.cached_tokens.inc(done.cached_tokens)
        self.completion_tokens.inc(len(done.output_ids))
        self.latency.observe(time.perf_counter() - started)


def _scheduler_readings(engine: Engine) -> list[Reading]:
    s = engine.scheduler
    c = s.cache
    return [
        Reading("roost_engine_running_requests", "Requests in the decode batch", lambda: s.running),
        Reading("roost_engine_waiting_requests", "Requests queued for a slot", lambda: s.waiting),
        Reading("roost_engine_max_running_requests", "Requests decoded together at most", lambda: s.max_running),
        Reading("roost_engine_paused", "1 while generation is paused for a weight update", lambda: float(s.paused)),
        Reading("roost_engine_decode_steps_total", "Decode steps run", lambda: s.steps, "counter"),
        Reading("roost_engine_prefill_batches_total", "Prefill batches run", lambda: s.prefill_batches, "counter"),
        Reading(
            "roost_engine_kv_retained_tokens",
            "Tokens retained for sessions between their calls",
            lambda: c.retained_tokens,
        ),
        Reading(
            "roost_engine_kv_retained_sessions",
            "Sessions whose keys and values are retained",
            lambda: c.retained_sessions,
        ),
        Reading(
            "roost_engine_kv_budget_tokens",
            "Tokens the sessions may retain together (0: no retention)",
            lambda: c.budget_tokens or 0,
        ),
        Reading(
            "roost_engine_kv_evicted_tokens_total",
            "Retained tokens evicted, a whole session at a time",
            lambda: c.stats.evicted_tokens,
            "counter",
        ),
        Reading(
            "roost_engine_kv_evicted_sessions_total", "Sessions evicted", lambda: c.stats.evicted_programs, "counter"
        ),
        Reading(
            "roost_engine_kv_reprefilled_tokens_total",
            "Prompt tokens a session held before an eviction and prefilled again",
            lambda: c.stats.reprefilled_tokens,
            "counter",
        ),
    ]


def _session_readings(sessions: SessionTable) -> list[Reading]:
    c = sessions.counts
    return [
        Reading(
            "roost_engine_open_sessions",
            "Sessions opened with /open_session and not closed",
            lambda: sessions.open_sessions,
        ),
        Reading(
            "roost_engine_session_continued_requests_total",
            "Requests that continued a finished request of their session (session_params.rid)",
            lambda: c.continued_requests,
            "counter",
        ),
        Reading(
            "roost_engine_session_sent_tokens_total",
            "Tokens those requests sent: the rest of their prompts came from the request they continued",
            lambda: c.sent_tokens,
            "counter",
        ),
        Reading(
            "roost_engine_session_continued_tokens_total",
            "Prompt tokens those requests took from the request they continued",
            lambda: c.continued_tokens,
            "counter",
        ),
    ]
