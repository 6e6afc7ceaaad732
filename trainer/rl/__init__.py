"""The RL loop on Ray: its setup, services, trainer ranks, rollout workers, the groups each step takes and the batches made of them."""
