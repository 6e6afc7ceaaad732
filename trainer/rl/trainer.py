"""The trainer as Ray actors: one `TrainerRank` per tensor/data-parallel rank, driven together.

    trainer = TrainerGroup.start(recipe, checkpoint="path/hf", placement=pg)
    stats = trainer.train_step(scored)                 # every rank gets the same batch
    trainer.export("ckpt/step-3/hf", "ckpt/step-3/adapter")   # collective; rank 0 writes
    trainer.save("ckpt/step-3/trainer"); trainer.load(...)

Each rank runs `parallel.init` with the group's rendezvous address, builds a
`MegatronPolicy` from the Hugging Face checkpoint, and trains on the whole scored batch
(`train_step` picks its own microbatches). SFT and RL share the policy: `set_loss` switches
the loss (the negative log-likelihood of SFT, or PPO/GRPO/GSPO) and the learning rate. With
`algorithm.critic` each rank also holds the value head: `values` gives the batch's values for GAE,
and the head's weights and optimizer go into every rank's checkpoint file.
"""

from __future__ import annotations

import os
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roost.tracing import Tracing

from ..recipe import Recipe

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    from roost.rollout.store.samples import Sample

    from ..advantages import Scored
    from ..losses import LossConfig
    from ..megatron.train import MegatronPolicy, StepStats, TrainConfig


def train_config(
    recipe: Recipe, checkpoint: str, reference: str | None = None, adapter: str | None = None
) -> TrainConfig:
    from ..corrections import Correction
    from ..losses import LossConfig
    from ..megatron.train import TrainConfig

    t = recipe.trainer
    loss = t.loss.model_dump()
    if loss["correction"] is not None:
        loss["correction"], loss["tis_cap"] = Correction(**loss["correction"]), None
    if reference is None:  # no KL term until RL names its reference (`set_loss`, after any SFT)
        loss["kl_coef"] = 0.0
    return TrainConfig(
        checkpoint=checkpoint,
        reference=reference,
        dtype=t.dtype,
        lr=t.lr,
        weight_decay=t.weight_decay,
        adam_betas=tuple(t.adam_betas),
        clip_grad=t.clip_grad,
        use_distributed_optimizer=t.use_distributed_optimizer,
        token_budget=t.token_budget,
        layout=t.layout,
        attention=t.attention,
        old_logprobs=t.old_logprobs,
        grammar_mask=t.grammar_mask,
        routing_replay=t.routing_replay,
        moe_aux_loss_coeff=t.moe_aux_loss_coeff,
        freeze_vision_tower=t.freeze_vision_tower,
        loss=LossConfig(**loss),
        lora=t.lora.spec() if t.lora else None,
        adapter=adapter,
        critic=recipe.algorithm.critic,
    )


class TrainerRank:
    """One rank of the trainer (a Ray actor)."""

    def __init__(self, rank: int, world_size: int, tp: int, threads: int | None, ep: int = 1) -> None:
        self.rank, self.world_size, self.tp, self.ep = rank, world_size, tp, ep
        self.threads = threads
        self.policy: MegatronPolicy | None = None
        self.store: Any = None
        """The process group's rendezvous store (rank 0 holds the listening one)."""
        self.tracing = Tracing.start("trainer")  # on with the OTEL_* variables the run hands its actors

    def address(self) -> str:
        """Rank 0's rendezvous, `host:port`: a store listening on a port the OS picked as it bound,
        held until `init` (a port found free and bound later was once taken in between)."""
        import ray
        import torch.distributed as dist

        host = ray.util.get_node_ip_address()
        self.store = dist.TCPStore(host, 0, self.world_size, is_master=True, wait_for_workers=False)
        return f"{host}:{self.store.port}"

    def init(self, rendezvous: str, config: TrainConfig) -> dict[str, Any]:
        import torch
        import torch.distributed as dist

        from ..megatron import parallel
        from ..megatron.train import MegatronPolicy

        torch.set_num_threads(self.threads or max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
        if self.store is None:
            host, port = rendezvous.rsplit(":", 1)
            self.store = dist.TCPStore(host, int(port), self.world_size, is_master=False)
        info = parallel.init(tp=self.tp, ep=self.ep, rank=self.rank, world_size=self.world_size, store=self.store)
        self.policy = MegatronPolicy(config)
        return asdict(info)

    def train_step(
        self, scored: list[Scored], traceparent: str | None = None, update_policy: bool = True
    ) -> tuple[StepStats, int]:
        """The step's statistics, and this rank's tensor-parallel rank; its spans are children of
        `traceparent` (the driver's `train.update`)."""
        with self.tracing.span("trainer.rank_step", {"roost.rank": self.rank}, parent=traceparent):
            stats = self.policy.train_step(scored, self.tracing, update_policy)
        self.tracing.flush()  # a rank is killed at the end of the run, its queue with it
        return stats, self.policy.info.tp_rank

    def values(self, samples: list[Sample]) -> list[list[float]]:
        return self.policy.values(samples)

    def use_images(self, images: dict[str, bytes]) -> None:
        self.policy.use_images(images)

    def set_loss(self, loss: LossConfig, lr: float, reference: str | None = None) -> None:
        self.policy.config.loss = loss
        self.set_lr(lr)
        if loss.kl_coef and reference and self.policy.reference is None:
            self.policy.config.reference = reference
            self.policy.reference = self.policy._reference_model()

    def set_lr(self, lr: float) -> None:
        for group in self.policy.optimizer.param_groups:
            group["lr"] = lr

    def reset_optimizer(self) -> None:
        self.policy.reset_optimizer()

    def export(self, folder: str, adapter: str | None = None) -> str:
        exported = str(self.policy.export_hf(folder))
        if adapter is not None and self.policy.config.lora is not None:
            self.policy.save_adapter(adapter)
        return exported

    def save_adapter(self, folder: str) -> str:
        return str(self.policy.save_adapter(folder))

    def save(self, folder: str) -> None:
        import torch

        Path(folder).mkdir(parents=True, exist_ok=True)
        state = {"optimizer": self.policy.optimizer.state_dict(), "steps": self.policy.steps}
        if self.policy.critic is not None:
            state["critic"] = self.policy.critic.state_dict()
        torch.save(state, Path(folder) / f"rank-{self.rank}.pt")

    def load(self, folder: str) -> None:
        import torch

        path = Path(folder) / f"rank-{self.rank}.pt"
        state = torch.load(path, weights_only=False)
        self.policy.optimizer.load_state_dict(state["optimizer"])
        self.policy.steps = state["steps"]
        if self.policy.critic is not None:
            self._load_critic(state, path)

    def _load_critic(self, state: dict[str, Any], path: Path) -> None:
        """The value head from the checkpoint; a checkpoint without one is refused, not resumed on
        a fresh head whose zero values would pass for trained ones."""
        from ..megatron.critic import CriticError

        if "critic" not in state:
            raise CriticError(
                f"{path} holds no value head: it was saved by a run without algorithm.critic; leave "
                "algorithm.critic out to resume it, or start the critic's run in a new output_dir"
            )
        self.policy.critic.load_state_dict(state["critic"], str(path))

    def shutdown(self) -> None:
        from ..megatron import parallel

        parallel.shutdown()


class TrainerGroup:
    """The driver's handle on all trainer ranks."""

    def __init__(self, ranks: list[ActorHandle[TrainerRank]]) -> None:
        self.ranks = ranks

    @classmethod
    def start(
        cls,
        recipe: Recipe,
        checkpoint: str,
        *,
        reference: str | None = None,
        adapter: str | None = None,
        scheduling: list[dict[str, Any]] | None = None,
    ) -> TrainerGroup:
        import ray

        from .starters import actor_options

        t, per_rank = recipe.trainer, recipe.placement.roles().trainer
        world = t.tp * t.dp
        actor = ray.remote(TrainerRank)
        ranks = []
        for rank in range(world):
            options: dict[str, Any] = {"num_cpus": per_rank.cpus, "num_gpus": per_rank.gpus, **actor_options(recipe)}
            if scheduling:
                options.update(scheduling[rank])
            threads = t.threads or max(1, int(per_rank.cpus))
            ranks.append(actor.options(**options).remote(rank, world, t.tp, threads, t.ep))
        rendezvous = ray.get(ranks[0].address.remote())
        config = train_config(recipe, checkpoint, reference, adapter)
        ray.get([r.init.remote(rendezvous, config) for r in ranks])
        return cls(ranks)

    def _all(self, method: str, *args: Any) -> list[Any]:
        import ray

        refs = [ray.put(a) if isinstance(a, list) else a for a in args]
        return ray.get([getattr(r, method).remote(*refs) for r in self.ranks])

    def train_step(self, scored: list[Scored], traceparent: str | None = None, update_policy: bool = True) -> StepStats:
        """One optimizer step (the value head's alone without `update_policy`); `extra` summed over
        data-parallel ranks (tensor-parallel ranks agree)."""
        per_rank = self._all("train_step", scored, traceparent, update_policy)
        extra: dict[str, float] = {}
        for stats, tp_rank in per_rank:
            if tp_rank == 0:
                for key, value in stats.extra.items():
                    extra[key] = extra.get(key, 0.0) + value
        return replace(per_rank[0][0], extra=extra)

    def use_images(self, images: dict[str, bytes]) -> None:
        """Every rank holds these images' bytes (by sha256) for the next samples that name them."""
        import ray

        self._all("use_images", ray.put(images))  # once in the object store, not once per rank

    def values(self, samples: list[Sample]) -> list[list[float]]:
        """The value head's per-token values of the samples (a forward on every rank; rank 0's)."""
        return self._all("values", samples)[0]

    def set_loss(self, loss: LossConfig, lr: float, reference: str | None = None) -> None:
        self._all("set_loss", loss, lr, reference)

    def set_lr(self, lr: float) -> None:
        self._all("set_lr", lr)

    def reset_optimizer(self) -> None:
        self._all("reset_optimizer")

    def export(self, folder: str, adapter: str | None = None) -> str:
        """The weights as a Hugging Face folder (merged, with LoRA) and, with LoRA, the adapter
        alone in PEFT's layout in `adapter`."""
        return self._all("export", folder, adapter)[0]

    def save_adapter(self, folder: str) -> str:
        """The LoRA adapter alone, in PEFT's layout (what a LoRA run syncs to the engine)."""
        return self._all("save_adapter", folder)[0]

    def save(self, folder: str) -> None:
        self._all("save", folder)

    def load(self, folder: str) -> None:
        self._all("load", folder)

    def shutdown(self) -> None:
        import ray

        try:
            self._all("shutdown")
        finally:
            for rank in self.ranks:
                ray.kill(rank)
