"""roost: an agent-gym hub with a trainer integration layer.

The top-level folders of the repository are this package's subpackages
(`roost.rollout` is `rollout/`, and so on); docs/architecture.md maps them.
"""

__version__ = "0.1.0"
