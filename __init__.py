"""roost: an agent-gym hub with a trainer integration layer.

The top-level folders of the repository are this package's subpackages
(`roost.rollout` is `rollout/`, and so on); see DESIGN.md's Layout.
"""

__version__ = "0.1.0"
