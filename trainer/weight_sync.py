"""Pushing new weights into the rollout engine.

    policy.export_hf(folder)                       # Hugging Face safetensors checkpoint
    await sync_weights(engine_url, folder, weight_version="3", engine_key=..., gateway_url=gateway, admin_key=...)

The gateway is paused around the swap (new calls wait, in-flight calls finish), the
engine loads the folder through SGLang's `/update_weights_from_disk`, and the new weight
version is what later calls report. Before anything is paused the checkpoint is checked
against the engine: same vocabulary size, same tokenizer (when the engine's tokenizer
folder is readable here). A failed load leaves the engine on its old weights, the
gateway resumed, and raises `WeightSyncError` with the engine's message.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from roost.rollout.engine.model_spec import read_config
from roost.rollout.keys import bearer
from roost.rollout.sglang_client import EngineError, SGLangClient

from .hf_checkpoint import CheckpointMismatch, tokenizer_fingerprint


class WeightSyncError(RuntimeError):
    """The engine did not take the new weights; it still serves the old ones."""


@dataclass
class SyncResult:
    weight_version: str
    seconds: float
    paused_s: float


def check_compatible(folder: str | Path, model_info: dict[str, Any]) -> None:
    """Raise `CheckpointMismatch` if the checkpoint cannot replace the engine's weights."""
    config = read_config(folder)
    engine_vocab = model_info.get("vocab_size")
    if engine_vocab is not None and int(engine_vocab) != int(config["vocab_size"]):
        raise CheckpointMismatch(
            f"checkpoint {folder} has vocab_size {config['vocab_size']} but the engine serves {engine_vocab}; "
            "train from the checkpoint the engine was started with"
        )
    tokenizer_path = model_info.get("tokenizer_path")
    if tokenizer_path and Path(tokenizer_path).is_dir():
        ours, theirs = tokenizer_fingerprint(folder), tokenizer_fingerprint(tokenizer_path)
        if ours and theirs and ours != theirs:
            raise CheckpointMismatch(
                f"checkpoint {folder} and the engine ({tokenizer_path}) use different tokenizers; "
                "token ids would not mean the same text"
            )


async def _gateway(session: aiohttp.ClientSession, url: str, action: str, admin_key: str | None) -> None:
    async with session.post(f"{url.rstrip('/')}/admin/{action}", json={}, headers=bearer(admin_key)) as resp:
        if resp.status >= 400:
            raise WeightSyncError(f"gateway {url} refused /admin/{action}: {resp.status} {await resp.text()}")


async def sync_weights(
    engine_url: str, folder: str | Path, *, weight_version: str | None = None, engine_key: str | None = None,
    gateway_url: str | None = None, admin_key: str | None = None, timeout_s: float = 600.0,
) -> SyncResult:
    """Load the checkpoint at `folder` into the engine (its key: `engine_key`), pausing the gateway
    (its key: `admin_key`) around it."""
    started = time.perf_counter()
    folder = Path(folder).resolve()
    async with SGLangClient(engine_url, api_key=engine_key, timeout_s=timeout_s) as engine, aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=timeout_s)
    ) as http:
        check_compatible(folder, await engine.model_info())
        if gateway_url:
            await _gateway(http, gateway_url, "pause", admin_key)
        paused = time.perf_counter()
        try:
            answer = await engine.update_weights_from_disk(str(folder), weight_version=weight_version)
        except EngineError as exc:
            answer = {"success": False, "message": str(exc)}
        finally:
            if gateway_url:
                await _gateway(http, gateway_url, "resume", admin_key)
        paused_s = time.perf_counter() - paused
    if not answer.get("success", False):
        raise WeightSyncError(f"engine at {engine_url} did not load {folder}: {answer.get('message', answer)}")
    version = str(answer.get("weight_version", weight_version))
    if weight_version is not None and version != weight_version:
        raise WeightSyncError(f"engine reports weight version {version!r}, expected {weight_version!r}")
    return SyncResult(weight_version=version, seconds=time.perf_counter() - started, paused_s=paused_s)


def sync_weights_blocking(engine_url: str, folder: str | Path, **kwargs: Any) -> SyncResult:
    """`sync_weights` for callers without an event loop (a training script, a Ray actor)."""
    return asyncio.run(sync_weights(engine_url, folder, **kwargs))
