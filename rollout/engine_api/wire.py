"""Wire types of the engine's SGLang-compatible API, and their validation.

Field names are SGLang's own (`GenerateReqInput`, `SamplingParams`). Fields the embedded
engine does not implement are accepted only at their default value, so a request built
with SGLang's classes works as it is, and one that asks for something this engine cannot
do gets a 400 naming the field instead of a silent difference.

Both ends use these types: the engine's server parses its requests with them, and
`roost.rollout.engine_api.sglang_client` builds its requests with them and reads the answers of
roost's engine and of SGLang servers with the answer models at the end.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class RequestError(ValueError):
    """A request the engine refuses; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


# GenerateReqInput fields the engine implements.
GENERATE_FIELDS = {
    "rid",
    "text",
    "input_ids",
    "sampling_params",
    "return_logprob",
    "stream",
    "logprob_start_len",
    "top_logprobs_num",
    "return_text_in_logprobs",
    "log_metrics",
    "no_logs",
    "custom_labels",
    "lora_path",
    "session_params",
    "return_routed_experts",
    "routed_experts_start_len",
    "image_data",
}

# SamplingParams fields the engine implements, and the unimplemented ones with the only
# value it accepts for them.
SAMPLING_FIELDS = {
    "max_new_tokens",
    "stop",
    "stop_token_ids",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "min_new_tokens",
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "no_stop_trim",
    "custom_params",
    "stream_interval",
    "sampling_seed",
    "n",
    "json_schema",
    "regex",
    "ebnf",
    "choice",
}
SAMPLING_DEFAULT_ONLY = {
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "structural_tag": None,
    "logit_bias": None,
}
# The fields that constrain a reply to a grammar; a request gives at most one.
CONSTRAINT_FIELDS = ("json_schema", "regex", "ebnf", "choice")


class SamplingParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_new_tokens: int = Field(128, ge=0)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = -1
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    min_new_tokens: int = Field(0, ge=0)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    custom_params: dict[str, Any] | None = None
    stream_interval: int | None = None
    sampling_seed: int | None = None
    n: int = 1
    json_schema: str | None = None
    """A JSON schema as a JSON string (SGLang's field); `$$ANY$$`: any JSON value."""
    regex: str | None = None
    ebnf: str | None = None
    choice: list[str] | None = None
    """roost's extension (vLLM's name): the reply is exactly one of these strings. SGLang has no
    such field; `choice_regex` gives the `regex` that asks an SGLang server for the same."""

    def constraint(self) -> tuple[str, str | list[str]] | None:
        """The grammar this request is held to, as (field name, value), or None."""
        return constraint_of({name: getattr(self, name) for name in CONSTRAINT_FIELDS})

    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


def constraint_of(params: dict[str, Any]) -> tuple[str, Any] | None:
    """The grammar sampling params (a request's, or a call's as recorded) hold a reply to, as
    (field name, value), or None."""
    given = [(name, params[name]) for name in CONSTRAINT_FIELDS if params.get(name) is not None]
    return given[0] if given else None


def parse_sampling_params(raw: Any) -> SamplingParams:
    if raw is None:
        return SamplingParams()
    if not isinstance(raw, dict):
        raise RequestError("sampling_params must be an object (one prompt per request)")
    unknown = sorted(set(raw) - SAMPLING_FIELDS - set(SAMPLING_DEFAULT_ONLY))
    if unknown:
        allowed = ", ".join(sorted(SAMPLING_FIELDS))
        raise RequestError(f"unknown sampling parameter(s) {', '.join(unknown)}; supported: {allowed}")
    for name, default in SAMPLING_DEFAULT_ONLY.items():
        if name in raw and raw[name] is not None and raw[name] != default:
            raise RequestError(
                f"sampling parameter {name}={raw[name]!r} is not supported by the embedded engine "
                f"(only {default!r}); use an SGLang server for it"
            )
    params = SamplingParams.model_validate({k: v for k, v in raw.items() if k in SAMPLING_FIELDS and v is not None})
    if params.n != 1:
        raise RequestError("n must be 1: send one request per sample")
    if params.top_k == 0 or params.top_k < -1:
        raise RequestError(f"top_k must be -1 (off) or >= 1, got {params.top_k}")
    _check_constraint(params)
    return params


def _check_constraint(params: SamplingParams) -> None:
    given = [name for name in CONSTRAINT_FIELDS if getattr(params, name) is not None]
    if len(given) > 1:
        raise RequestError(f"give at most one of {', '.join(CONSTRAINT_FIELDS)}; got {' and '.join(given)}")
    if params.choice is not None and (not params.choice or not all(params.choice)):
        raise RequestError("choice must be a non-empty list of non-empty strings")


def choice_regex(choices: list[str]) -> str:
    """A regex that matches exactly one of `choices` (xgrammar's and SGLang's regex syntax)."""
    return "|".join("(" + re.sub(r"[\\.^$|?*+()\[\]{}]", lambda m: "\\" + m.group(), c) + ")" for c in choices)


class SessionParams(BaseModel):
    """SGLang's `session_params`. `id` alone: the call is one of that program's (roost's gateway
    names its calls so; the whole prompt is sent). With `rid`, in a session opened with
    `/open_session`, the prompt is that finished request's prompt and output ids followed by the
    request's `input_ids` (SGLang's `Session.create_req`; `roost.rollout.engine.sessions`)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=256)
    rid: str | None = None
    """The finished request of the session this one continues."""
    offset: int | None = None
    """Keep only this many tokens (a Python slice end) of the continued request before the new ones."""
    replace: bool | None = None
    drop_previous_output: bool | None = None
    """Continue the named request's prompt without its output."""


class CloseSessionRequest(BaseModel):
    """SGLang's `CloseSessionReqInput`."""

    model_config = ConfigDict(extra="forbid")

    session_id: str = Field(min_length=1, max_length=256)


class OpenSessionRequest(BaseModel):
    """SGLang's `OpenSessionReqInput` (`streaming` and `timeout` since its streaming sessions).
    The embedded engine needs no opening for calls that send their whole prompt; a call that
    continues a stored request (`session_params.rid`) needs its session open."""

    model_config = ConfigDict(extra="forbid")

    capacity_of_str_len: int = 0
    session_id: str | None = Field(None, min_length=1, max_length=256)
    streaming: bool | None = None
    """Append-only: one request at a time, each continuing the last (SGLang keeps its KV between them)."""
    timeout: float | None = Field(None, gt=0)
    """Seconds without a request after which the session is closed."""


class GenerateRequest(BaseModel):
    """The subset of SGLang's GenerateReqInput that the embedded engine serves."""

    model_config = ConfigDict(extra="forbid")

    rid: str | None = None
    text: str | None = None
    input_ids: list[int] | None = None
    sampling_params: dict[str, Any] | None = None
    return_logprob: bool = False
    stream: bool = False
    logprob_start_len: int | None = None
    top_logprobs_num: int | None = None
    return_text_in_logprobs: bool = False
    log_metrics: bool = True
    no_logs: bool = False
    custom_labels: dict[str, Any] | None = None
    lora_path: str | None = None
    """The LoRA adapter to generate with: the name it was loaded under (SGLang's field, which
    takes an adapter's name too); unset: the base model."""
    session_params: SessionParams | None = None
    """The program the request is a call of, and the stored request it continues, if any (SGLang's field)."""
    return_routed_experts: bool = False
    """Answer each token's routed experts (`meta_info.routed_experts`; a mixture-of-experts model
    only): SGLang's field, since after 0.5.3 (`roost.rollout.engine_api.routed_experts`)."""
    routed_experts_start_len: int = 0
    """The first position whose routed experts are answered (SGLang's field; 0: the whole prompt)."""
    image_data: list[str] | None = None
    """The prompt's images (data URLs), one per run of image placeholder ids, in order (SGLang's field)."""


def parse_generate(body: Any) -> GenerateRequest:
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    # Fields of SGLang's GenerateReqInput that this engine lacks are fine when unset.
    extra = {k: v for k, v in body.items() if k not in GENERATE_FIELDS}
    set_extra = sorted(k for k, v in extra.items() if v not in (None, False, [], {}))
    if set_extra:
        raise RequestError(f"field(s) {', '.join(set_extra)} are not supported by the embedded engine")
    fields = {k: v for k, v in body.items() if k in GENERATE_FIELDS and v is not None}
    if isinstance(fields.get("input_ids"), list) and fields["input_ids"] and isinstance(fields["input_ids"][0], list):
        raise RequestError("batched /generate (a list of prompts) is not supported: send one request per prompt")
    if any(isinstance(fields.get(name), list) for name in ("text", "rid", "lora_path")):
        raise RequestError("batched /generate (a list of prompts) is not supported: send one request per prompt")
    request = GenerateRequest.model_validate(fields)
    if (request.text is None) == (request.input_ids is None):
        raise RequestError("give exactly one of `text` or `input_ids`")
    if request.top_logprobs_num:
        raise RequestError("top_logprobs_num is not supported by the embedded engine")
    return request


class UpdateWeightsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_path: str
    load_format: str | None = None
    abort_all_requests: bool = False
    weight_version: str | None = None
    is_async: bool = False
    torch_empty_cache: bool = False
    keep_pause: bool = False
    recapture_cuda_graph: bool = False
    token_step: int = 0
    flush_cache: bool = True


class LoadLoraRequest(BaseModel):
    """vLLM's `LoadLoRAAdapterRequest` (`POST /v1/load_lora_adapter`), which roost's engine serves too."""

    model_config = ConfigDict(extra="forbid")

    lora_name: str
    """The name requests choose it by (`lora_path` on `/generate`, `model` on vLLM's OpenAI routes)."""
    lora_path: str
    """A PEFT adapter folder on the engine's machine."""
    load_inplace: bool = False
    """Replace a loaded adapter of the same name (new weights after a training step); without it a
    taken name is refused."""


class UpdateWeightVersionRequest(BaseModel):
    """SGLang's and vLLM's `POST /update_weight_version`: the version later calls report, set
    without new base weights (after a LoRA adapter is replaced in place)."""

    model_config = ConfigDict(extra="forbid")

    new_version: str
    abort_all_requests: bool = False
    """SGLang's field; roost's engine refuses true (the gateway drains calls before a sync)."""


class UnloadLoraRequest(BaseModel):
    """vLLM's `UnloadLoRAAdapterRequest` (`POST /v1/unload_lora_adapter`)."""

    model_config = ConfigDict(extra="forbid")

    lora_name: str
    lora_int_id: int | None = None


class PauseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: str = "in_place"


class AbortRequest(BaseModel):
    """SGLang's `AbortReq`: one request by its rid, or all of them."""

    model_config = ConfigDict(extra="forbid")

    rid: str = ""
    abort_all: bool = False


class Answer(BaseModel):
    """An answer of an SGLang-API engine, as roost's client reads it.

    Unlike the requests above (roost's engine parses them, so it refuses what it does not know:
    extra="forbid"), answers may come from a real SGLang server, which adds fields from version
    to version (`input_token_logprobs`, `hidden_states`, `spec_verify_ct`, ...): unknown fields are
    ignored (extra="ignore"), and the fields read here are the ones both engines send.
    """

    model_config = ConfigDict(extra="ignore", coerce_numbers_to_str=True)


class GenerateMeta(Answer):
    """`meta_info` of a `/generate` answer or stream chunk (SGLang's tokenizer manager builds it)."""

    finish_reason: dict[str, Any] | None
    """None until the last chunk of a stream."""
    weight_version: str = "default"
    prompt_tokens: int = 0
    output_token_logprobs: list[Any] | None = None
    """`[[logprob, token_id, text | None], ...]`, cumulative in a stream. The entries are checked
    where the client reads them, not here: validating a tuple per token would make the parse of
    every model call's answer about a third slower (measured at 100 to 8,000 tokens)."""
    constraint: dict[str, Any] | None = None
    """roost's engine: `{"type": <the sampling field>, "backend": "xgrammar"}` when a grammar held
    the reply (SGLang does not say)."""
    input_token_logprobs: list[Any] | None = None
    """`[[logprob | None, token_id, text | None], ...]` of the prompt from `logprob_start_len` on,
    when asked (the prompt's first token, with no context, has None)."""
    routed_experts: str | None = None
    """With `return_routed_experts`, on the finished answer (a stream's last chunk): the tokens'
    routed experts, SGLang's base64 encoding (`roost.rollout.engine_api.routed_experts`)."""


class GenerateAnswer(Answer):
    """A `/generate` answer, or one chunk of its stream (whose `output_ids` are the new ids only)."""

    text: str = ""
    output_ids: list[int]
    meta_info: GenerateMeta


class UpdateWeightsAnswer(Answer):
    """The answer to `/update_weights_from_disk` (SGLang's `UpdateWeightFromDiskReqOutput`)."""

    success: bool
    message: str
    num_paused_requests: int = 0
    weight_version: str | None = None
    """The version now served; roost's engine names it, SGLang 0.5 does not."""
