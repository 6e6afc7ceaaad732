"""roost.rollout.store: the trajectory store (SQLite, WAL), its export, and training samples."""
