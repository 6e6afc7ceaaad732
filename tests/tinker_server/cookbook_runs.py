"""What the cookbook loop tests share: running a loop against roost, where a route the loop needs is
not served yet, ends in a named exception the test marks `xfail(strict=True)` with."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from pathlib import Path


class NotServedYet(Exception):
    """The loop stopped at a request roost does not serve yet (its message says which)."""


class SaveStateNotServed(NotServedYet):
    """The loop trained, then its final checkpoint's `save_state` (POST /api/v1/save_weights) got 404."""


class LossNotServed(NotServedYet):
    """`forward_backward` with this loss got the server's 400 saying it is not served."""


def run_loop(main: Awaitable[None]) -> SaveStateNotServed | None:
    """Run a cookbook loop; a 404 on `save_state` is handed back (the test checks the run's metrics
    first), a loss not served is raised at once, anything else propagates."""
    import tinker

    try:
        asyncio.run(main)
    except tinker.NotFoundError as error:
        if not str(error.response.request.url).endswith("/api/v1/save_weights"):
            raise
        return SaveStateNotServed(str(error))
    except tinker.BadRequestError as error:
        if "is not served yet" not in str(error) or "loss_fn" not in str(error):
            raise
        raise LossNotServed(str(error)) from error
    return None


def read_metrics(log_path: Path) -> list[dict]:
    """The rows the cookbook's logger wrote to `metrics.jsonl`, one per step."""
    return [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines() if line.strip()]
