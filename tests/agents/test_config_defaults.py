"""`roost eval`'s defaults are the runner's: its CLI, `EvalConfig` and `RunConfig` agree on the
turns, episodes at once and timeout an episode gets when none is given."""

from __future__ import annotations

import inspect

from roost.agents.cli import eval_command
from roost.agents.evaluate import EvalConfig
from roost.agents.runner import RunConfig


def test_roost_eval_and_the_runner_share_their_defaults():
    run, config = RunConfig(), EvalConfig(env="unused")
    flags = inspect.signature(eval_command).parameters
    for name in ("concurrency", "max_turns", "timeout_s"):
        assert getattr(config, name) == getattr(run, name) == flags[name].default.default, name
