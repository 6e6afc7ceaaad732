"""roost's test suite, a subpackage of `roost` like the repository's other folders.

Helpers import by package (`from roost.tests.rollout.gateway_helpers import say`), and env
entry points name it the same way (`roost.tests.envs.toy_envs:make_factory`): that resolves
in every process that can import roost, env workers and spawned children included.
"""
