"""What an engine can hold at once, read from what it reports: the budget admission runs against.

Each engine family says it in its own place:
- SGLang's `/get_server_info`: `max_total_num_tokens` (its KV pool, in tokens; also each data
  parallel rank's `internal_states[i].memory_usage.token_capacity`) and `max_running_requests`
  (a server argument, often left unset). roost's embedded engine answers the same fields: its
  slots, and slots × the context length.
- vLLM's `/metrics`: `vllm:cache_config_info`, an info gauge whose labels are the cache config,
  `num_gpu_blocks` × `block_size` tokens (the CPU build reports its KV blocks there too).

A field an engine does not report stays None: admission does not bound what nobody measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class EngineCapacity:
    """How much an engine (or all of them, summed) can hold at once; None: not reported."""

    programs: int | None = None
    """Requests it runs at once (the embedded engine: its slots, each holding one program's cache)."""
    tokens: int | None = None
    """Tokens of keys and values it can hold."""

    def __add__(self, other: EngineCapacity) -> EngineCapacity:
        return EngineCapacity(_add(self.programs, other.programs), _add(self.tokens, other.tokens))

    def share(self, fraction: float) -> EngineCapacity:
        """This part of it (gateway workers split the engines between them); at least one program."""
        if fraction >= 1.0:
            return self
        return EngineCapacity(
            None if self.programs is None else max(1, int(self.programs * fraction)),
            None if self.tokens is None else int(self.tokens * fraction),
        )

    @property
    def known(self) -> bool:
        return self.programs is not None or self.tokens is not None


def _add(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else a + b


def _positive_int(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def sglang_capacity(info: dict[str, Any]) -> EngineCapacity:
    """From an SGLang (or roost engine) `/get_server_info` answer."""
    tokens = _positive_int(info.get("max_total_num_tokens"))
    if tokens is None:
        ranks = [s.get("memory_usage", {}).get("token_capacity") for s in info.get("internal_states") or []]
        counted = [t for t in map(_positive_int, ranks) if t is not None]
        tokens = sum(counted) if counted else None
    return EngineCapacity(_positive_int(info.get("max_running_requests")), tokens)


def vllm_capacity(metrics_text: str) -> EngineCapacity:
    """From vLLM's Prometheus `/metrics` text: its cache config's blocks × block size (summed
    over the engines of a data-parallel server, each of which reports its own)."""
    tokens = None
    for family in text_string_to_metric_families(metrics_text):
        if family.name not in ("vllm:cache_config_info", "vllm:cache_config"):  # a gauge, or read as an info
            continue
        for sample in family.samples:
            blocks = _positive_int(sample.labels.get("num_gpu_blocks"))
            size = _positive_int(sample.labels.get("block_size"))
            if blocks is not None and size is not None:
                tokens = _add(tokens, blocks * size)
    return EngineCapacity(tokens=tokens)
