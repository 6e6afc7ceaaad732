"""OSWorld's data hooks: the recipe `prepare` hook and the small config `roost envs check` runs.

env:
  name: osworld
  prepare: roost.envs.osworld.prepare:fixtures
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from roost.envs.conformance import CheckConfig
from roost.envs.protocol import TextAction


def fixtures(out: str | None = None) -> dict[str, Any]:
    """roost's offline OSWorld task set (written to `out`, default where the env looks)."""
    from roost.envs.osworld.fixtures import write_fixtures
    from roost.envs.osworld.task_set import default_tasks_dir

    written = write_fixtures(Path(out).expanduser() if out else default_tasks_dir())
    return {"tasks": str(written.root)}


CHECK_DOMAIN = "mousepad"
"""The check runs a Mousepad task: a real app whose accessibility tree reads in a fraction of a second
(Chromium's takes seconds a read on a loaded machine, and the check observes some twenty times)."""


def check_config() -> CheckConfig:
    """A fixture task on this host's desktop (Xvfb), short waits; WAIT as the probe, DONE to finish."""
    args = {**fixtures(), "backend": "local", "max_steps": 4, "settle_s": 0.1, "wait_s": 0.1, "step_timeout_s": 10}
    task_id = json.loads((Path(args["tasks"]) / "test.json").read_text())[CHECK_DOMAIN][0]
    return CheckConfig(
        env_args=args, split="test", task_id=task_id, probe=TextAction("WAIT"), finish=(TextAction("DONE"),)
    )
