"""What every Tinker route shares: the server's state, the caller's tenant and the 404 of an unknown name.

Input that can be checked at once (an unknown base model or model id, a body that does not parse)
is refused at once with a 4xx whose `detail` says what was wrong; errors found while the work runs
come back from `retrieve_future` as `{"error", "category"}`, which the SDK raises as
`RequestFailedError`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import HTTPException, Request

from . import wire
from .external_weights import Signer
from .futures import FutureQueue
from .recording import SampleRecorder
from .sampling import Samplers
from .sessions import Registry, SessionFinished, UnknownName

PROTO = "application/x-protobuf"


@dataclass
class ServerState:
    """Everything the routes share, passed explicitly (no module state)."""

    base_models: dict[str, Path]
    """Model name clients use → its Hugging Face folder."""
    registry: Registry
    futures: FutureQueue
    run_training: Callable[..., Any]
    """Run a blocking call on the one training thread: `await run_training(fn, *args)`."""
    make_backend: Callable[[Path, wire.LoraConfig | None], Any]
    compress_fwdbwd: bool
    full_weight: bool
    """Every model trains every weight (`--full-weight`); else LoRA adapters as each model asks."""
    max_lora_rank: int
    context_lengths: dict[str, int]
    """Base model name → its longest prompt plus completion (as the engine caps it)."""
    samplers: Samplers
    weights_root: Path
    """Where saved sampler weights are exported, one folder per save."""
    recorder: SampleRecorder
    """Where every sample is recorded (the trajectory store)."""
    signer: Signer
    """Signs the URLs external weights download from."""


def caller(request: Request) -> str:
    """The tenant of the request's API key, set by the app's key check (`Depends(caller)`)."""
    return request.state.tenant


def known(state: ServerState, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except UnknownName as exc:
        raise HTTPException(404, str(exc)) from None
    except SessionFinished as exc:
        raise HTTPException(410, str(exc)) from None
