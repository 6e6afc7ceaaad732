"""roost.rollout.gateway: the OpenAI-compatible gateway that records token-exact trajectories."""
