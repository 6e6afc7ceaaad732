"""The small config `roost envs check webshop` runs: roost's generated catalog (no files needed)."""

from __future__ import annotations

from roost.envs.conformance import CheckConfig
from roost.envs.protocol import TextAction


def check_config() -> CheckConfig:
    """The generated catalog of seed 0; a search as the probe, the oracle shopper's plan to finish."""
    return CheckConfig(
        env_args={"seed": 0}, split="test", probe=TextAction("search[shirt]"), finish_by_expert_plan=True
    )
