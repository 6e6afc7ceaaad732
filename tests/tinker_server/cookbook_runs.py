"""What the cookbook loop tests share: the metrics a loop's logger writes."""

from __future__ import annotations

import json
from pathlib import Path


def read_metrics(log_path: Path) -> list[dict]:
    """The rows the cookbook's logger wrote to `metrics.jsonl`, one per step."""
    return [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines() if line.strip()]
