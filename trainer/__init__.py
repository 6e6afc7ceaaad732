"""The trainer: samples → advantages → prefix-tree microbatches → Megatron step → weights.

    from roost.trainer.sample_sources import group_samples, samples_from_store
    from roost.trainer.advantages import AdvantageConfig, compute_advantages
    from roost.trainer.megatron import parallel
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig
    from roost.trainer.weight_sync import sync_weights
    from roost.trainer.layout import LayoutError, plan          # where each role goes (docs/scale.md)

Submodules load their heavy dependencies (torch, Megatron-core) only when imported.
Where it sits and its contracts: docs/architecture.md; its parts: docs/trainer-internals.md.
"""
