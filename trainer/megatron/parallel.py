"""Process groups for the trainer: torch.distributed plus Megatron's model-parallel state.

On CPU the backend is gloo and the CUDA shims are switched on; on GPU it is NCCL.
Megatron keeps its parallel state in module globals (its design, not ours); `init` and
`shutdown` bracket it so one process can build and tear it down, as tests do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class ParallelInfo:
    """Where this process sits: its global rank and its tensor-, data- and expert-parallel
    coordinates (expert parallelism splits a mixture-of-experts model's experts over data-parallel
    ranks: each holds `1 / ep_size` of every layer's experts)."""

    rank: int
    world_size: int
    tp_rank: int
    tp_size: int
    dp_rank: int
    dp_size: int
    ep_rank: int = 0
    ep_size: int = 1

    @property
    def writes_checkpoints(self) -> bool:
        return self.tp_rank == 0 and self.dp_rank == 0


def init(
    tp: int = 1,
    *,
    ep: int = 1,
    rank: int | None = None,
    world_size: int | None = None,
    store: Any = None,
    seed: int = 1234,
) -> ParallelInfo:
    """Join (or create) the process group and set up Megatron's model parallelism: `tp`-way tensor
    parallelism and `ep`-way expert parallelism (a mixture-of-experts model's experts split over
    `ep` data-parallel ranks).

    The rendezvous is `store` (a `torch.distributed.TCPStore`), else the `MASTER_ADDR`
    environment (torchrun's); without either this makes a one-process world on a store whose
    port the OS picks as it binds (a port found free and bound later can be taken between the
    two, and was, by another process).
    """
    import torch.distributed as dist
    from megatron.core import parallel_state

    from . import cpu_shims

    if not dist.is_initialized():
        rank = int(os.environ.get("RANK", 0)) if rank is None else rank
        world_size = int(os.environ.get("WORLD_SIZE", 1)) if world_size is None else world_size
        if store is None and "MASTER_ADDR" not in os.environ:
            store = dist.TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False)
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
        dist.init_process_group(backend, rank=rank, world_size=world_size, store=store)
    world = dist.get_world_size()
    if world % tp:
        raise ValueError(f"world size {world} is not divisible by tensor-parallel size {tp}")
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp, expert_model_parallel_size=ep)
    cpu_shims.activate()
    if torch.cuda.is_available():
        from megatron.core import tensor_parallel

        tensor_parallel.model_parallel_cuda_manual_seed(seed)
    torch.manual_seed(seed)
    return info()


def info() -> ParallelInfo:
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    return ParallelInfo(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        tp_rank=ps.get_tensor_model_parallel_rank(),
        tp_size=ps.get_tensor_model_parallel_world_size(),
        dp_rank=ps.get_data_parallel_rank(),
        dp_size=ps.get_data_parallel_world_size(),
        ep_rank=ps.get_expert_model_parallel_rank(),
        ep_size=ps.get_expert_model_parallel_world_size(),
    )


def shutdown() -> None:
    """Tear down Megatron's parallel state and the process group."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()
