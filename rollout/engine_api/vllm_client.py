"""One async client for vLLM's token-in API and its RL routes, with `SGLangClient`'s methods.

The gateway renders and tokenizes itself and sends token ids to `/inference/v1/generate`; the
sampled ids come back with their logprobs, which are the model's own distribution when vLLM
runs with `--logprobs-mode raw_logprobs` (as `roost engine --backend vllm` starts it). Sampling
parameters arrive in SGLang's names (the gateway builds one shape for every engine) and are
renamed to vLLM's `SamplingParams`. Pause, resume, weight versions and aborts go through vLLM's
RL routes, and new weights are loaded from disk by the workers' `reload_weights` through
`/collective_rpc` (vLLM's weight-transfer engines target GPUs, this path works on CPU too;
a tied model's output head is added to the folder first: `roost.rollout.engine_api.vllm_weights`). The
RL and dev routes exist only on a server started with `VLLM_SERVER_DEV_MODE=1`.

A call with images goes to the same route with the images as `content_parts` (data URLs). vLLM's
multimodal processor always expands each image's ONE placeholder id into the image's run (its
Qwen-VL prompt update targets the single `<|image_pad|>`, so an already expanded run would be
expanded again), so each run the gateway rendered is sent as one placeholder id, and the prompt
ids vLLM answers with (`return_token_ids`) must equal the gateway's: the record is what vLLM saw.

Wire models mirror vLLM's own request and answer classes
(`vllm.entrypoints.scale_out.token_in_token_out.protocol`: `GenerateRequest`,
`GenerateTokensResponse`, `GenerateTokensStreamResponse`); the contract tests validate the
requests with those classes.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from roost.rollout.engine_api.capacity import EngineCapacity, vllm_capacity
from roost.rollout.engine_api.sglang_client import (
    EngineError,
    EngineHTTP,
    EngineProtocolError,
    EngineRejected,
    Generation,
    GenerationDelta,
)
from roost.rollout.engine_api.vllm_weights import remove_stage, staged_for_reload
from roost.rollout.engine_api.wire import UpdateWeightsAnswer

GENERATE_PATH = "/inference/v1/generate"
# SGLang's sampling parameter names → vLLM's (`vllm.SamplingParams`).
SAMPLING_NAMES = {
    "max_new_tokens": "max_tokens",
    "stop": "stop",
    "stop_token_ids": "stop_token_ids",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "min_new_tokens": "min_tokens",
    "ignore_eos": "ignore_eos",
    "skip_special_tokens": "skip_special_tokens",
    "spaces_between_special_tokens": "spaces_between_special_tokens",
    "no_stop_trim": "include_stop_str_in_output",
    "sampling_seed": "seed",
    "n": "n",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "repetition_penalty": "repetition_penalty",
    "custom_params": "extra_args",
}
# What has no vLLM counterpart but changes nothing: SGLang's stream chunking.
SAMPLING_IGNORED = {"stream_interval"}


class VLLMGenerateRequest(BaseModel):
    """The fields of vLLM's `GenerateRequest` that roost sends."""

    model_config = ConfigDict(extra="forbid")

    request_id: str | None = None
    token_ids: list[int]
    sampling_params: dict[str, Any]
    stream: bool = False
    output_mode: str = "tokens"
    model: str | None = None
    """A loaded LoRA adapter's name (vLLM resolves adapters by the request's model); unset: the base."""
    content_parts: list[dict[str, str]] | None = None
    """The prompt's images, `{"type": "image_url", "url": <data URL>}` each, in placeholder order."""
    return_token_ids: bool | None = None
    """Ask for the prompt ids after vLLM's placeholder expansion (set with images)."""


class VLLMLogProb(BaseModel):
    """`GenerateLogProbsContent`: the sampled token at one position."""

    model_config = ConfigDict(extra="ignore")

    token_id: int
    logprob: float


class VLLMLogProbs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    content: list[VLLMLogProb] | None = None


class WeightVersionSpan(BaseModel):
    """`vllm.outputs.WeightVersionSpan`: output tokens [start, end) came from weights `version`."""

    model_config = ConfigDict(extra="ignore")

    version: str
    start: int
    end: int


class VLLMChoice(BaseModel):
    """A choice of `GenerateTokensResponse` or `GenerateTokensStreamResponse` (answers are read
    leniently: a newer vLLM may add fields)."""

    model_config = ConfigDict(extra="ignore")

    index: int = 0
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None
    logprobs: VLLMLogProbs | None = None
    weight_versions: list[WeightVersionSpan] | None = None


class VLLMGenerateAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore")

    request_id: str | None = None
    choices: list[VLLMChoice]
    prompt_token_ids: list[int] | None = None


def collapse_image_runs(input_ids: list[int], image_token_id: int, images: int) -> list[int]:
    """`input_ids` with each run of `image_token_id` as one id, as vLLM's processor wants them;
    refused unless there is one run per image."""
    out: list[int] = []
    runs = 0
    for i, token in enumerate(input_ids):
        if token == image_token_id and i > 0 and input_ids[i - 1] == image_token_id:
            continue
        runs += token == image_token_id
        out.append(token)
    if runs != images:
        raise EngineRejected(
            f"the prompt has {runs} runs of image placeholder id {image_token_id} but {images} images came with it", 400
        )
    return out


def vllm_sampling_params(params: dict[str, Any]) -> dict[str, Any]:
    """SGLang-named sampling parameters → vLLM's, asking for the sampled token's logprob."""
    unknown = sorted(set(params) - set(SAMPLING_NAMES) - SAMPLING_IGNORED)
    if unknown:
        raise EngineRejected(f"sampling parameters {unknown} have no vLLM counterpart; leave them out", 400)
    out = {SAMPLING_NAMES[name]: value for name, value in params.items() if name in SAMPLING_NAMES}
    # logprobs=0: the sampled token's logprob alone, no alternatives.
    return {**out, "logprobs": 0}


def _finish_reason(choice: VLLMChoice, ids: list[int]) -> dict[str, Any]:
    """vLLM's finish reason in SGLang's shape: `matched` is the stop string or id, or the EOS id."""
    kind = choice.finish_reason or "unknown"
    if kind == "stop":
        matched = choice.stop_reason if choice.stop_reason is not None else (ids[-1] if ids else None)
        return {"type": "stop", "matched": matched}
    if kind == "length":
        return {"type": "length", "length": len(ids)}
    return {"type": kind}


def _logprobs(choice: VLLMChoice, ids: list[int]) -> list[float]:
    content = choice.logprobs.content if choice.logprobs is not None else None
    values = [entry.logprob for entry in content or []]
    if len(values) != len(ids):
        raise EngineProtocolError(
            f"vLLM answered {len(ids)} token ids but {len(values)} logprobs; was it started with "
            "logprobs allowed (--max-logprobs >= 0)?"
        )
    return values


def vllm_prompt_scores(answer: Any, input_ids: list[int], url: str) -> list[float]:
    """vLLM's `prompt_logprobs` (a `{token id: {"logprob", ...}}` per prompt token, None for the
    first) as one float per token: the logprob of the token the prompt has there."""
    entries = answer.get("prompt_logprobs") if isinstance(answer, dict) else None
    if not isinstance(entries, list) or len(entries) != len(input_ids):
        got = "none" if not isinstance(entries, list) else len(entries)
        raise EngineProtocolError(f"vLLM at {url} answered {got} prompt logprobs for {len(input_ids)} prompt tokens")
    scores = [math.nan]
    for token, entry in zip(input_ids[1:], entries[1:]):
        found = entry.get(str(token)) if isinstance(entry, dict) else None
        if not isinstance(found, dict) or "logprob" not in found:
            raise EngineProtocolError(f"vLLM at {url} gave no logprob for prompt token {token}: {str(entry)[:200]}")
        scores.append(float(found["logprob"]))
    return scores


def _answer(body: Any, what: str) -> VLLMGenerateAnswer:
    try:
        return VLLMGenerateAnswer.model_validate(body)
    except ValidationError as exc:
        raise EngineProtocolError(f"not a vLLM {what}: {str(body)[:200]}") from exc


def check_prompt_seen(answer: VLLMGenerateAnswer, input_ids: list[int]) -> None:
    """vLLM's expanded prompt must be the gateway's ids, token for token."""
    seen = answer.prompt_token_ids
    if seen != input_ids:
        at = next(
            (i for i, (a, b) in enumerate(zip(seen or [], input_ids)) if a != b), min(len(seen or []), len(input_ids))
        )
        raise EngineProtocolError(
            f"vLLM expanded the images into {len(seen or [])} prompt ids, the gateway rendered {len(input_ids)} "
            f"(first difference at {at}): the image placeholder counts disagree"
        )


def _choice(body: Any, what: str) -> VLLMChoice:
    answer = _answer(body, what)
    if len(answer.choices) != 1:
        raise EngineProtocolError(f"vLLM {what} has {len(answer.choices)} choices, expected 1")
    return answer.choices[0]


class VLLMClient(EngineHTTP):
    """Async client for a vLLM server (0.32 or later): `SGLangClient`'s methods over vLLM's API."""

    def __init__(self, base_url: str, **kwargs: Any):
        super().__init__(base_url, **kwargs)
        # The version the next tokens come from, until an answer says otherwise: vLLM names
        # it only on a stream's last chunk.
        self.weight_version = "default"
        self._image_token_id: int | None = None

    async def image_token_id(self) -> int:
        """The served model's image placeholder id, from its checkpoint's config.json (the folder
        vLLM names as the model's root: roost starts vLLM on a local checkpoint)."""
        if self._image_token_id is None:
            path = Path((await self.model_info())["model_path"]) / "config.json"
            try:
                self._image_token_id = int(json.loads(path.read_text())["image_token_id"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise EngineRejected(
                    f"vLLM's model at {path.parent} names no image_token_id in its config.json: {exc}", 400
                ) from exc
        return self._image_token_id

    def generate_payload(
        self,
        input_ids: list[int],
        sampling_params: dict[str, Any],
        *,
        stream: bool,
        rid: str | None,
        lora: str | None = None,
        image_data: list[str] | None = None,
        image_token_id: int | None = None,
    ) -> dict[str, Any]:
        """With `image_data`, each run of `image_token_id` in `input_ids` goes as one id and the
        images as content parts (vLLM expands them again)."""
        ids = list(input_ids)
        parts = None
        if image_data:
            if image_token_id is None:
                raise EngineRejected("a call with images needs the model's image placeholder id", 400)
            ids = collapse_image_runs(ids, image_token_id, len(image_data))
            parts = [{"type": "image_url", "url": url} for url in image_data]
        request = VLLMGenerateRequest.model_construct(
            request_id=rid,
            token_ids=ids,
            sampling_params=vllm_sampling_params(sampling_params),
            stream=stream,
            output_mode="tokens",
            model=lora,
            content_parts=parts,
            return_token_ids=True if parts else None,
        )
        return {name: value for name, value in request.__dict__.items() if value is not None}

    def _version(self, choice: VLLMChoice) -> str:
        if choice.weight_versions:
            self.weight_version = choice.weight_versions[-1].version
        return self.weight_version

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
        """`session` is not vLLM's to use: its prefix cache is by content (admission only).
        `image_data`: the prompt's images as data URLs, one per run of image placeholder ids."""
        if routed_experts:
            raise ValueError("vLLM's generate API reports no routed experts (the gateway's record_routing is sglang's)")
        image_id = await self.image_token_id() if image_data else None
        payload = self.generate_payload(
            input_ids, sampling_params, stream=False, rid=rid, lora=lora, image_data=image_data, image_token_id=image_id
        )
        body = await self._request("POST", GENERATE_PATH, payload)
        if image_data:
            check_prompt_seen(_answer(body, "/inference/v1/generate answer"), list(input_ids))
        choice = _choice(body, "/inference/v1/generate answer")
        ids = choice.token_ids or []
        return Generation(
            output_ids=ids,
            output_logprobs=_logprobs(choice, ids),
            finish_reason=_finish_reason(choice, ids),
            weight_version=self._version(choice),
            prompt_tokens=len(input_ids),
        )

    async def score(self, input_ids: list[int], *, lora: str | None = None) -> list[float]:
        """The model's logprob of each of `input_ids` given the ones before it (NaN for the first):
        vLLM's `prompt_logprobs` (0: each prompt token's own), one token sampled and thrown away
        (vLLM samples at least one)."""
        payload = {
            "token_ids": list(input_ids),
            "sampling_params": {"max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0},
            "output_mode": "tokens",
            **({"model": lora} if lora else {}),
        }
        answer = await self._request("POST", GENERATE_PATH, payload)
        return vllm_prompt_scores(answer, input_ids, self.base_url)

    async def generate_stream(
        self,
        input_ids: list[int],
        sampling_params: dict[str, Any],
        *,
        rid: str | None = None,
        lora: str | None = None,
        session: str | None = None,
        image_data: list[str] | None = None,
    ) -> AsyncIterator[GenerationDelta]:
        """Stream a generation; each vLLM chunk carries the new ids and their logprobs (with
        images, the first also vLLM's expanded prompt ids, checked as `generate` checks them)."""
        image_id = await self.image_token_id() if image_data else None
        payload = self.generate_payload(
            input_ids, sampling_params, stream=True, rid=rid, lora=lora, image_data=image_data, image_token_id=image_id
        )
        first = True
        async for chunk in self._stream(GENERATE_PATH, payload):
            if image_data and first:
                check_prompt_seen(_answer(chunk, "stream chunk"), list(input_ids))
            first = False
            yield self._delta(_choice(chunk, "stream chunk"))

    async def close_session(self, session: str) -> None:
        """vLLM keeps nothing per session."""

    def _delta(self, choice: VLLMChoice) -> GenerationDelta:
        ids = choice.token_ids or []
        reason = _finish_reason(choice, ids) if choice.finish_reason is not None else None
        return GenerationDelta(
            output_ids=ids,
            output_logprobs=_logprobs(choice, ids),
            finish_reason=reason,
            weight_version=self._version(choice),
        )

    async def load_lora_adapter(self, name: str, path: str, *, replace: bool = False) -> Any:
        """vLLM's `/v1/load_lora_adapter` (the server needs --enable-lora and
        VLLM_ALLOW_RUNTIME_LORA_UPDATING=True); it answers plain text."""
        body = {"lora_name": name, "lora_path": path, "load_inplace": replace}
        return await self._request("POST", "/v1/load_lora_adapter", body)

    async def update_weight_version(self, version: str) -> Any:
        """The version later calls report (vLLM's dev-mode route, as `update_weights_from_disk` uses)."""
        answer = await self._request("POST", "/update_weight_version", {"new_version": version})
        self.weight_version = version
        return answer

    async def unload_lora_adapter(self, name: str) -> Any:
        return await self._request("POST", "/v1/unload_lora_adapter", {"lora_name": name})

    async def capacity(self) -> EngineCapacity:
        """Its KV cache in tokens, from the cache config `/metrics` reports (vLLM has no server-info route)."""
        return vllm_capacity(await self.get_text("/metrics"))

    async def model_info(self) -> dict[str, Any]:
        """SGLang's `/get_model_info` fields, from vLLM's `/v1/models` and `/weight_info`."""
        models = (await self._request("GET", "/v1/models")).get("data") or []
        if not models:
            raise EngineProtocolError(f"vLLM at {self.base_url} lists no model in /v1/models")
        model = models[0]
        path = model.get("root") or model["id"]
        await self._refresh_version()
        return {
            "model_path": path,
            "tokenizer_path": path,
            "served_model_name": model["id"],
            "max_context_length": model.get("max_model_len"),
            "weight_version": self.weight_version,
            "engine": "vllm",
        }

    async def _refresh_version(self) -> None:
        try:
            self.weight_version = str((await self._request("GET", "/weight_info"))["weight_version"])
        except (EngineRejected, KeyError, TypeError):
            pass  # a server without VLLM_SERVER_DEV_MODE=1 has no /weight_info

    async def update_weights_from_disk(
        self, model_path: str, *, weight_version: str | None = None
    ) -> UpdateWeightsAnswer:
        """Load the checkpoint folder `model_path` into every worker, in place, between a pause
        that lets running requests finish and a resume; the prefix cache is dropped (its keys
        and values came from the old weights) and `weight_version` becomes vLLM's version."""
        # A tied model's checkpoint goes through a staged folder holding its output head too
        # (see roost.rollout.engine_api.vllm_weights); a folder not visible here is sent as it is.
        try:
            stage = await asyncio.to_thread(staged_for_reload, Path(model_path))
        except (OSError, ValueError) as exc:  # unreadable config or weights: nothing was sent
            return UpdateWeightsAnswer(success=False, message=f"could not read the checkpoint {model_path}: {exc}")
        try:
            return await self._reload(str(stage or model_path), model_path, weight_version)
        finally:
            if stage is not None:
                await asyncio.to_thread(remove_stage, stage)

    async def _reload(self, weights_path: str, model_path: str, weight_version: str | None) -> UpdateWeightsAnswer:
        try:
            await self._request("POST", "/pause?mode=wait")
            try:
                await self._request(
                    "POST", "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": weights_path}}
                )
                await self._request("POST", "/reset_prefix_cache")
                if weight_version is not None:
                    await self._request("POST", "/update_weight_version", {"new_version": weight_version})
            finally:
                await self._request("POST", "/resume")
        except EngineRejected as exc:
            return UpdateWeightsAnswer(success=False, message=_dev_mode_hint(exc))
        except EngineError as exc:
            return UpdateWeightsAnswer(success=False, message=str(exc))
        await self._refresh_version()
        return UpdateWeightsAnswer(success=True, message=f"loaded {model_path}", weight_version=self.weight_version)

    async def abort(self, rid: str) -> Any:
        return await self._request("POST", "/inference/v1/abort_requests", {"request_ids": [rid]})

    async def flush_cache(self) -> Any:
        return await self._request("POST", "/reset_prefix_cache")

    async def pause_generation(self) -> Any:
        # "keep": running requests freeze and go on after /resume, as SGLang's in_place pause.
        return await self._request("POST", "/pause?mode=keep")

    async def continue_generation(self) -> Any:
        return await self._request("POST", "/resume")

    async def is_paused(self) -> bool:
        return bool((await self._request("GET", "/is_paused")).get("is_paused"))


def _dev_mode_hint(exc: EngineRejected) -> str:
    if exc.status == 404:
        return (
            f"{exc}: vLLM serves its RL and dev routes only when started with VLLM_SERVER_DEV_MODE=1 "
            "(roost engine --backend vllm sets it)"
        )
    return str(exc)
