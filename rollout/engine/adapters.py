"""The LoRA adapters an engine serves, loaded and unloaded at run time (vLLM's
`/v1/load_lora_adapter`), each checked against the base model before it is used.

Adapters are PEFT folders read by `roost.rollout.lora`. A request names its adapter; it holds the
`LoadedAdapter` until it finishes, so unloading one takes its name away from new requests at once
while the requests already admitted or waiting finish with it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch

from roost.rollout.engine.lora_rows import LoadedAdapter
from roost.rollout.engine_api.wire import RequestError
from roost.rollout.lora import UNEMBEDDING_TARGET, Adapter, AdapterError, load_adapter, peft_key


@dataclass
class AdapterLimits:
    max_loras: int = 8
    """Adapters loaded at once (SGLang's --max-loaded-loras)."""
    max_lora_rank: int = 64
    """Highest rank an adapter may have (vLLM's and SGLang's --max-lora-rank)."""


@dataclass
class AdapterSet:
    """name -> adapter, with the base model's module shapes to check new ones against."""

    shapes: dict[str, tuple[int, int]]
    """Adaptable module name -> (in features, out features) of the base model."""
    layers: int
    dtype: torch.dtype
    limits: AdapterLimits = field(default_factory=AdapterLimits)
    loaded: dict[str, LoadedAdapter] = field(default_factory=dict)
    _uids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def get(self, name: str) -> LoadedAdapter:
        adapter = self.loaded.get(name)
        if adapter is None:
            raise RequestError(
                f"LoRA adapter {name!r} is not loaded; loaded: {sorted(self.loaded) or '(none)'}. "
                "Load it with POST /v1/load_lora_adapter {lora_name, lora_path}",
                404,
            )
        return adapter

    def read(self, name: str, path: str) -> LoadedAdapter:
        """Read and check the folder (slow: call it off the event loop); raises RequestError 400."""
        if not name:
            raise RequestError("lora_name is empty: name the adapter (requests choose it by that name)")
        try:
            adapter = load_adapter(path)
        except (AdapterError, OSError, ValueError, KeyError) as exc:
            raise RequestError(f"could not load LoRA adapter {name!r} from {path}: {exc}") from exc
        return self.fit(name, path, adapter)

    def fit(self, name: str, source: str, adapter: Adapter) -> LoadedAdapter:
        """`adapter` checked against the base model and ready to serve as `name` (`source`: where it
        came from, for errors and `/v1/models`); raises RequestError 400 naming each misfit."""
        spec = adapter.spec
        if spec.rank > self.limits.max_lora_rank:
            raise RequestError(
                f"LoRA adapter {name!r} has rank {spec.rank}, above this engine's --max-lora-rank "
                f"{self.limits.max_lora_rank}; restart the engine with a higher --max-lora-rank"
            )
        weights = dict(adapter.weights)
        pairs, problems = {}, []
        for module in spec.targets:
            for layer in [None] if module == UNEMBEDDING_TARGET else range(self.layers):
                key_a, key_b = peft_key(layer, module, "lora_A"), peft_key(layer, module, "lora_B")
                name_ = key_a.removeprefix("base_model.model.").removesuffix(".lora_A.weight")
                a, b = weights.pop(key_a, None), weights.pop(key_b, None)
                problem = _misfit(name_, a, b, spec.rank, self.shapes.get(name_))
                if problem:
                    problems.append(problem)
                else:
                    pairs[name_] = (a.to(self.dtype), (b * spec.scaling).to(self.dtype))
        problems += [f"unexpected tensor {key}" for key in sorted(weights)]
        if problems:
            shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
            raise RequestError(f"LoRA adapter {name!r} at {source} does not fit the base model: {shown}")
        return LoadedAdapter(name, str(source), spec.rank, next(self._uids), pairs)

    def add(self, adapter: LoadedAdapter, *, replace: bool = False) -> None:
        """Serve `adapter` under its name; `replace`: in place of a loaded one of that name (new
        weights after a training step), which requests already admitted keep using."""
        if adapter.name in self.loaded and not replace:
            raise RequestError(
                f"LoRA adapter {adapter.name!r} is already loaded (from {self.loaded[adapter.name].path}); "
                "unload it first, pick another name, or pass load_inplace: true to replace it"
            )
        if adapter.name not in self.loaded and len(self.loaded) >= self.limits.max_loras:
            raise RequestError(
                f"{len(self.loaded)} LoRA adapters are loaded, this engine's --max-loras; unload one of "
                f"{sorted(self.loaded)} first"
            )
        self.loaded[adapter.name] = adapter

    def remove(self, name: str) -> LoadedAdapter:
        adapter = self.get(name)
        del self.loaded[name]
        return adapter

    def in_use(self, adapter: LoadedAdapter, requests) -> int:
        """How many of `requests` (the scheduler's running and waiting ones) use `adapter`."""
        return sum(1 for r in requests if r.plan.adapter is adapter)


def _misfit(
    module: str, a: torch.Tensor | None, b: torch.Tensor | None, rank: int, shape: tuple[int, int] | None
) -> str | None:
    if shape is None:
        return f"{module}: the base model has no such module"
    if a is None or b is None:
        return f"{module}: lora_A or lora_B missing"
    want_a, want_b = (rank, shape[0]), (shape[1], rank)
    if tuple(a.shape) != want_a or tuple(b.shape) != want_b:
        return f"{module}: lora_A {tuple(a.shape)} and lora_B {tuple(b.shape)}, expected {want_a} and {want_b}"
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return f"{module}: contains NaN or inf"
    return None
