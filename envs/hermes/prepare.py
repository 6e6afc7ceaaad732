"""The small config `roost envs check hermes` runs: roost's own tasks in a bubblewrap sandbox.

Its only action starts hermes-agent against a model endpoint, so the check sends none that the
env accepts: the rules that compare or finish episodes are skipped for it.
"""

from __future__ import annotations

import shutil

from roost.envs.conformance import CheckConfig


def check_config() -> CheckConfig:
    """The built-in tasks; bubblewrap where it is installed (else the env's default sandbox)."""
    return CheckConfig(env_args={"sandbox": {"backend": "bubblewrap"}} if shutil.which("bwrap") else {})
