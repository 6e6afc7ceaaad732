"""The env protocol's conformance suite: what `check_env` is to Gymnasium, for roost envs.

    from roost.envs.conformance import CheckConfig, check_env, check_named

    report = await check_env(make_factory(data_dir=...), CheckConfig(probe=TextAction("look")))
    report.raise_for_failures()   # ConformanceError naming the first broken rule

    roost envs check alfworld                         # a registered env, with its own small config
    roost envs check mypkg.myenv:make_factory --env-arg data_dir=/data --probe-text look

The rules (`roost.envs.conformance.rules`, one function each) are the invariants of
`roost.envs.protocol` made executable; a rule that cannot run without something the env
alone cannot give (an action it accepts, a way to end an episode) is skipped, not passed.
"""

from roost.envs.conformance.suite import CheckReport, ConformanceError, RuleResult, Verdict, check_env, check_named
from roost.envs.conformance.trial import CheckConfig

__all__ = ["CheckConfig", "CheckReport", "ConformanceError", "RuleResult", "Verdict", "check_env", "check_named"]
