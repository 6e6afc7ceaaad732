"""Megatron-core's CUDA assumptions, shimmed for CPU (gloo) runs.

Megatron-core 0.16 hard-codes CUDA in places a CPU run reaches: `torch.cuda.current_device()`
as a device for buffers, `device="cuda"` literals in the optimizer and grad clipping, CUDA
streams in DDP, the CUDA RNG tracker and `param.type() == "torch.cuda.FloatTensor"` checks in
the optimizers; without Transformer Engine its MoE router's gating (`router_gating_linear`)
reads a `te_general_gemm` its failed import never bound (NameError), and the MoE all-to-all
dispatcher turns only CUDA tensors of split sizes into numpy. Rather than patch torch for the whole process, `activate()` gives each loaded
`megatron.core` module its own `torch` that answers those calls for the CPU and forwards
everything else. Nothing outside this module touches Megatron's internals for the CPU.

`activate()` is idempotent and does nothing when CUDA is available.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

_FACTORIES = (
    "tensor",
    "zeros",
    "ones",
    "empty",
    "full",
    "arange",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "randn",
    "rand",
    "randint",
    "as_tensor",
)


def _cpu_device(device: Any) -> Any:
    if device is None:
        return None
    if isinstance(device, int) or str(device).startswith("cuda"):
        return torch.device("cpu")
    return device


def _on_cpu(factory: Callable[..., Any]) -> Callable[..., Any]:
    def make(*args: Any, **kwargs: Any) -> Any:
        if "device" in kwargs:
            kwargs["device"] = _cpu_device(kwargs["device"])
        return factory(*args, **kwargs)

    return make


class _NullStream:
    def wait_stream(self, other: Any) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def record_event(self, *args: Any) -> _NullStream:
        # the MoE all-to-all dispatcher records an event on its side stream and synchronizes it
        return self


class _CpuCuda:
    """What Megatron finds under `torch.cuda` on a CPU run."""

    def __init__(self) -> None:
        self.amp = torch.amp

    def current_device(self) -> torch.device:
        return torch.device("cpu")

    def is_available(self) -> bool:
        return False

    def device_count(self) -> int:
        return 0

    def synchronize(self, *args: Any) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def Stream(self, *args: Any, **kwargs: Any) -> _NullStream:  # noqa: N802 (torch's name)
        return _NullStream()

    def default_stream(self, *args: Any) -> _NullStream:
        return _NullStream()

    def current_stream(self, *args: Any) -> _NullStream:
        return _NullStream()

    def stream(self, *args: Any) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cuda, name)


class _CpuTorch(types.ModuleType):
    """`torch` as Megatron's modules see it on CPU: CUDA devices become the CPU."""

    def __init__(self) -> None:
        super().__init__("torch")
        self.cuda = _CpuCuda()
        for name in _FACTORIES:
            setattr(self, name, _on_cpu(getattr(torch, name)))

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


class _CpuMemoryBuffer:
    """Replaces Megatron's global memory buffer, which allocates on the current CUDA device."""

    def get_tensor(self, shape: Any, dtype: torch.dtype, name: str, mem_alloc_context: Any = None) -> torch.Tensor:
        return torch.empty(tuple(shape), dtype=dtype)


_CPU_TORCH = _CpuTorch()


def needed() -> bool:
    """True when Megatron runs without CUDA here and so needs the shims."""
    return not torch.cuda.is_available()


def activate() -> None:
    """Point every loaded `megatron.core` module at the CPU `torch`; set up RNG and buffers.

    Call after Megatron's modules are imported and after `initialize_model_parallel`
    (which creates the global memory buffer this replaces).
    """
    if not needed():
        return
    _import_megatron_modules()
    for name, module in list(sys.modules.items()):
        if name.startswith("megatron.core") and getattr(module, "torch", None) is torch:
            module.torch = _CPU_TORCH
    _wrap_type_checks()
    _bind_missing_te_gemm()
    _split_sizes_as_numpy()
    from megatron.core import parallel_state, tensor_parallel

    parallel_state._GLOBAL_MEMORY_BUFFER = _CpuMemoryBuffer()
    # Dropout is off in RL training; the inference tracker's fork() is a no-op, which is
    # all the attention and layer code asks of the CUDA RNG tracker.
    tensor_parallel.random.initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)


def _import_megatron_modules() -> None:
    import megatron.core.distributed  # noqa: F401
    import megatron.core.distributed.finalize_model_grads  # noqa: F401
    import megatron.core.models.gpt.gpt_model  # noqa: F401
    import megatron.core.optimizer  # noqa: F401
    import megatron.core.optimizer.clip_grads  # noqa: F401
    import megatron.core.optimizer.distrib_optimizer  # noqa: F401
    import megatron.core.tensor_parallel  # noqa: F401
    import megatron.core.transformer.moe.moe_utils  # noqa: F401
    import megatron.core.transformer.moe.router  # noqa: F401
    import megatron.core.transformer.moe.token_dispatcher  # noqa: F401
    import megatron.core.transformer.utils  # noqa: F401


def _split_sizes_as_numpy() -> None:
    """The MoE all-to-all dispatcher hands its split sizes to `all_to_all_single` through
    `maybe_move_tensor_to_cpu(..., as_numpy=True)`, which converts only CUDA tensors; a CPU tensor
    stays one, and torch's binding refuses tensors as split sizes (TypeError): give it numpy."""
    from megatron.core.transformer.moe import moe_utils, token_dispatcher

    original = moe_utils.maybe_move_tensor_to_cpu
    if getattr(token_dispatcher.maybe_move_tensor_to_cpu, "_roost_cpu_shim", False):
        return

    def to_cpu(tensor: Any, as_numpy: bool = False, record_stream: bool = False) -> Any:
        if as_numpy and torch.is_tensor(tensor) and not tensor.is_cuda:
            return tensor.numpy()
        return original(tensor, as_numpy=as_numpy, record_stream=record_stream)

    to_cpu._roost_cpu_shim = True  # type: ignore[attr-defined]
    token_dispatcher.maybe_move_tensor_to_cpu = to_cpu


def _bind_missing_te_gemm() -> None:
    """`moe_utils` imports `te_general_gemm` from Transformer Engine and, when that fails, leaves
    the name unbound, yet `router_gating_linear` tests it against None: bind it to None (the
    plain matmul path) where the import failed."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None


def _wrap_type_checks() -> None:
    from megatron.core.optimizer import distrib_optimizer, optimizer

    targets = [
        (distrib_optimizer.DistributedOptimizer, "__init__"),
        (optimizer.Float16OptimizerWithFloat16Params, "__init__"),
        (optimizer, "clip_grad_by_total_norm_fp32"),
        (distrib_optimizer, "clip_grad_by_total_norm_fp32"),
    ]
    for owner, name in targets:
        fn = getattr(owner, name, None)
        if fn is None or getattr(fn, "_roost_cpu_shim", False):
            continue
        setattr(owner, name, _under_cuda_type_names(fn))


def _under_cuda_type_names(fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        with cuda_tensor_type_names():
            return fn(*args, **kwargs)

    call._roost_cpu_shim = True  # type: ignore[attr-defined]
    return call


@contextlib.contextmanager
def cuda_tensor_type_names() -> Iterator[None]:
    """Inside Megatron's optimizers and grad clipping, `Tensor.type()` reports CUDA names.

    They accept parameters by comparing `param.type()` with `"torch.cuda.FloatTensor"`
    and friends; on CPU the names lack `.cuda`.
    """
    if not needed():
        yield
        return
    original = torch.Tensor.type

    def cuda_named(self: torch.Tensor, dtype: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
        if dtype is None and not kwargs:
            name = original(self)
            return name.replace("torch.", "torch.cuda.", 1) if not name.startswith("torch.cuda.") else name
        return original(self, dtype, non_blocking, **kwargs)

    torch.Tensor.type = cuda_named  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.type = original  # type: ignore[method-assign]
