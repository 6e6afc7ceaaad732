"""Lets PyPI's torchvision import beside the CPU torch in vLLM's virtualenv, without its operators.

vLLM's Qwen-VL models import transformers' Qwen2-VL image processor, which imports torchvision's
transforms. PyPI's torchvision wheels for Linux are CUDA builds: their compiled operators
(`torchvision/_C.so`) need libcudart and torch's CUDA libraries, which a CPU torch lacks, so
`torchvision.extension` finds them unloadable and torchvision goes on without them, except that
`torchvision._meta_registrations` registers fake kernels for `torchvision::nms` and
`torchvision::qnms` by name, and torch refuses that for operators nobody defined
("operator torchvision::nms does not exist").

`make vllm` copies this file into the virtualenv as `roost_vllm_torchvision.py` with a `.pth`
line that imports it at interpreter start (vLLM's subprocesses included). It costs nothing
until torchvision is imported: then, only where torchvision's own operators did not load, it
defines those two operators' schemas (no kernels), so torchvision imports; its transforms run on
torch, and calling nms, roi_align or any other compiled operator still fails as it would with no
torchvision. A torchvision built for CPU (pytorch.org's `whl/cpu` index) loads its operators and
is left alone. This file imports nothing from roost: it runs in vLLM's environment.
"""

from __future__ import annotations

import importlib.abc
import sys

# The operators `torchvision._meta_registrations` names in `torch.library.register_fake`,
# with their schemas as torchvision's C++ registers them.
SCHEMAS = {
    "nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
HOOKED_MODULE = "torchvision._meta_registrations"


class DefineMissingOperators(importlib.abc.MetaPathFinder):
    """Defines the operators' schemas just before `torchvision._meta_registrations` is imported,
    when torchvision's extension did not load; finds nothing itself."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == HOOKED_MODULE:
            sys.meta_path.remove(self)
            define_missing_operators()
        return None


def define_missing_operators() -> list[str]:
    """Define the schemas torchvision's meta registrations need where its extension did not load;
    returns the operators defined (none when torchvision has its own)."""
    import torch
    from torchvision.extension import _has_ops

    if _has_ops():
        return []
    for name, schema in SCHEMAS.items():
        torch.library.define(f"torchvision::{name}", schema)
    return list(SCHEMAS)


def install() -> None:
    """Put the hook in front of the import system once (the `.pth` line calls this)."""
    if not any(isinstance(finder, DefineMissingOperators) for finder in sys.meta_path):
        sys.meta_path.insert(0, DefineMissingOperators())
