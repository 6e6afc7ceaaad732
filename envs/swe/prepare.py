"""The small config `roost envs check swe` runs: roost's fixture repositories in a bubblewrap sandbox."""

from __future__ import annotations

import shutil

from roost.envs.conformance import CheckConfig
from roost.envs.protocol import ToolCall


def check_config() -> CheckConfig:
    """The fixture tasks (built once under $ROOST_HOME); an echo as the probe, an empty submission to finish."""
    # bubblewrap starts in milliseconds and needs no engine; without it the env picks its default.
    sandbox = {"sandbox": {"backend": "bubblewrap"}} if shutil.which("bwrap") else {}
    return CheckConfig(
        env_args={"command_timeout_s": 10, **sandbox},
        probe=ToolCall("bash", {"command": "echo roost-check"}),
        finish=(ToolCall("submit", {}),),
    )
