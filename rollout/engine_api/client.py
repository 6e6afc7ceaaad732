"""What roost asks of a rollout engine, whichever family serves it.

`EngineClient` is the interface the gateway, weight sync and the RL services use; two clients
satisfy it: `SGLangClient` (SGLang's native API, which roost's embedded engine speaks too) and
`VLLMClient` (vLLM's token-in generate API and its RL routes). `engine_client` builds the one
for an engine kind; `detect_backend` asks a running server which kind it is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol, Self

import httpx

from roost.rollout.engine_api.capacity import EngineCapacity
from roost.rollout.engine_api.sglang_client import Generation, GenerationDelta, SessionMode, SGLangClient
from roost.rollout.engine_api.vllm_client import VLLMClient
from roost.rollout.engine_api.wire import UpdateWeightsAnswer

EngineBackend = Literal["embedded", "sglang", "vllm"]
ENGINE_BACKENDS: tuple[str, ...] = ("embedded", "sglang", "vllm")


class EngineClient(Protocol):
    """Token ids in, token ids and the model's own logprobs out; pause, resume, new weights."""

    base_url: str

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc: object) -> None: ...

    async def close(self) -> None: ...

    async def generate(
        self,
        input_ids: list[int],
        sampling_params: dict[str, Any],
        *,
        rid: str | None = None,
        lora: str | None = None,
        session: str | None = None,
        image_data: list[str] | None = None,
        routed_experts: bool = False,
    ) -> Generation:
        """`routed_experts`: ask for every token's routed experts (a mixture-of-experts model; an
        engine that cannot answer them refuses). `lora`: the name of a loaded LoRA adapter to generate with (None: the base model).
        `session`: the program the call is part of, where the engine keeps one's cache between
        calls (roost's embedded engine; SGLang's streaming sessions when the gateway uses them);
        others ignore it. `image_data`: the prompt's images as data URLs, one per run of image
        placeholder ids, in order. The answer is for the whole `input_ids` however the call was sent."""
        ...

    def generate_stream(
        self,
        input_ids: list[int],
        sampling_params: dict[str, Any],
        *,
        rid: str | None = None,
        lora: str | None = None,
        session: str | None = None,
        image_data: list[str] | None = None,
    ) -> AsyncIterator[GenerationDelta]: ...

    async def close_session(self, session: str) -> None:
        """The program is over: the engine may drop what it kept for it (a no-op where it keeps nothing)."""
        ...

    async def health(self) -> bool: ...

    async def score(self, input_ids: list[int], *, lora: str | None = None) -> list[float]:
        """The model's logprob of each of `input_ids` given the ones before it (NaN for the first):
        a teacher's scores of a student's recorded tokens, by id."""
        ...

    async def capacity(self) -> EngineCapacity:
        """What it can hold at once, as it reports it (`roost.rollout.engine_api.capacity`)."""
        ...

    async def model_info(self) -> dict[str, Any]: ...

    async def update_weights_from_disk(
        self, model_path: str, *, weight_version: str | None = None
    ) -> UpdateWeightsAnswer: ...

    async def abort(self, rid: str) -> Any: ...

    async def flush_cache(self) -> Any: ...

    async def pause_generation(self) -> Any: ...

    async def continue_generation(self) -> Any: ...

    async def load_lora_adapter(self, name: str, path: str, *, replace: bool = False) -> Any:
        """Serve the PEFT adapter folder `path` (on the engine's machine) under `name`; `replace`: in
        place of the loaded adapter of that name (new weights after a LoRA training step)."""
        ...

    async def update_weight_version(self, version: str) -> Any:
        """The weight version later calls report, set without loading base weights (an adapter
        replaced in place is a new version of the policy)."""
        ...

    async def lora_adapters(self) -> list[str]:
        """The names of the LoRA adapters the engine serves now."""
        ...

    async def unload_lora_adapter(self, name: str) -> Any:
        """Stop serving `name`; requests already admitted with it finish with it."""
        ...


def engine_client(backend: str, base_url: str, *, sglang_sessions: bool = False, **kwargs: Any) -> EngineClient:
    """The client for an engine of kind `backend` (`embedded` and `sglang` speak SGLang's API).
    `sglang_sessions`: an `sglang` engine's calls go in its streaming sessions (it must be
    launched with --enable-streaming-session); roost's engine always has its calls named."""
    if backend == "vllm":
        return VLLMClient(base_url, **kwargs)
    if backend == "embedded":
        return SGLangClient(base_url, sessions=SessionMode.NAMED, **kwargs)
    if backend == "sglang":
        return SGLangClient(base_url, sessions=SessionMode.STREAMING if sglang_sessions else SessionMode.NONE, **kwargs)
    raise ValueError(f"unknown engine backend {backend!r}; expected one of {', '.join(ENGINE_BACKENDS)}")


async def detect_backend(base_url: str, *, timeout_s: float = 5.0) -> EngineBackend:
    """Which API the server at `base_url` speaks: SGLang's (and roost's engine's) answer
    `GET /get_model_info`; vLLM has no such route and answers `GET /version` with its version.
    A server that answers neither (down, starting) is taken as SGLang's."""
    url = base_url.rstrip("/")
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as http:
            if (await http.get(f"{url}/get_model_info")).status_code == 200:
                return "sglang"
            answer = await http.get(f"{url}/version")
    except httpx.HTTPError:
        return "sglang"
    return "vllm" if answer.status_code == 200 and "version" in _json(answer) else "sglang"


def _json(answer: httpx.Response) -> dict[str, Any]:
    try:
        body = answer.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
