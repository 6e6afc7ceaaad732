"""The trainer's ranks as Ray actors: they meet on the store rank 0 listens on, then act as one group."""

from __future__ import annotations

import pytest

from roost.trainer.recipe import validate_recipe
from roost.trainer.rl.trainer import TrainerGroup

pytestmark = pytest.mark.slow


def test_two_data_parallel_ranks_meet_on_rank_0s_store_and_export_once(tmp_path, tiny_model_path):
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        recipe = validate_recipe(
            {
                "name": "dp2",
                "env": {"name": "alfworld"},
                "model": {"path": str(tiny_model_path)},
                "trainer": {"dp": 2, "threads": 1},
                "placement": {"num_cpus": 2},
            }
        )
        group = TrainerGroup.start(recipe, str(tiny_model_path))
        try:
            ports = {ray.get(rank.__ray_call__.remote(lambda self: self.store.port)) for rank in group.ranks}
            assert len(ports) == 1  # rank 1 joined the store rank 0 bound, not one of its own
            folder = group.export(str(tmp_path / "hf"))
            assert (tmp_path / "hf" / "model.safetensors").is_file() and folder.endswith("hf")
        finally:
            group.shutdown()
    finally:
        ray.shutdown()
