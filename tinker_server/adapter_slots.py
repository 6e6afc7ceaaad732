"""The LoRA snapshots loaded into one base model's engine: at most `limit` at once, the least
recently sampled unloaded first.

A snapshot's adapter folder stays on disk while the server runs, so an adapter unloaded here is
loaded again when its sampling client next samples; sampling sessions and named saves never go
stale. Unloading one that a request still uses is safe: the engine lets the requests already
holding it finish with it (`Engine.unload_lora`).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class AdapterRef:
    """A LoRA snapshot: the name the engine serves it under and its PEFT folder."""

    name: str
    folder: Path


class AdapterSlots:
    """Loads snapshots into `engine` on demand, keeping at most `limit` loaded."""

    def __init__(self, engine, limit: int) -> None:
        self.engine = engine
        self.limit = limit
        self._loaded: OrderedDict[str, AdapterRef] = OrderedDict()
        self._lock = asyncio.Lock()
        self.loads = 0
        """How many loads this engine has done (a reload after an unload counts again)."""

    async def hold(self, ref: AdapterRef):
        """`ref`'s `LoadedAdapter`, loaded first if need be; the caller's requests keep it usable
        whatever is unloaded later."""
        async with self._lock:  # one load or unload at a time, so a name is never half there
            if self._loaded.get(ref.name) != ref:
                # a name saved again holds new weights: they replace the old in place
                replace = ref.name in self._loaded
                while not replace and len(self._loaded) >= self.limit:
                    oldest, _ = self._loaded.popitem(last=False)
                    await self.engine.unload_lora(oldest)
                await self.engine.load_lora(ref.name, str(ref.folder), replace=replace)
                self._loaded[ref.name] = ref
                self.loads += 1
            self._loaded.move_to_end(ref.name)
            return self.engine.adapters.get(ref.name)

    async def drop(self, ref: AdapterRef) -> None:
        """Unload `ref` if it is loaded (its files are being deleted); requests holding it finish."""
        async with self._lock:
            if self._loaded.get(ref.name) == ref:
                del self._loaded[ref.name]
                await self.engine.unload_lora(ref.name)

    @property
    def loaded(self) -> list[str]:
        """The adapters loaded now, least recently sampled first."""
        return list(self._loaded)
