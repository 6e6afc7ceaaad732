"""OpenAI sampling fields → SGLang `sampling_params`, refusing what cannot be honoured."""

from __future__ import annotations

from typing import Any

from roost.rollout.gateway.core.errors import ContextLengthExceeded, InvalidRequest
from roost.rollout.gateway.openai.wire import ChatCompletionRequest, CompletionRequest, SamplingFields

_PASS_THROUGH = (
    ("temperature", "temperature"),
    ("top_p", "top_p"),
    ("top_k", "top_k"),
    ("min_p", "min_p"),
    ("presence_penalty", "presence_penalty"),
    ("frequency_penalty", "frequency_penalty"),
    ("repetition_penalty", "repetition_penalty"),
    ("seed", "sampling_seed"),
    ("min_tokens", "min_new_tokens"),
    ("ignore_eos", "ignore_eos"),
    ("stop_token_ids", "stop_token_ids"),
    ("custom_params", "custom_params"),
)


def stop_strings(req: SamplingFields) -> list[str]:
    if req.stop is None:
        return []
    return [req.stop] if isinstance(req.stop, str) else [s for s in req.stop if s]


def refuse_unsupported(req: SamplingFields) -> None:
    if req.logit_bias:
        raise InvalidRequest("logit_bias is not supported by this gateway's engines; remove it", param="logit_bias")
    if req.n > 1 and req.stream:
        raise InvalidRequest("n > 1 cannot be streamed; send n separate streamed requests or stream=false", param="n")
    if isinstance(req, ChatCompletionRequest):
        if req.functions or req.function_call is not None:
            raise InvalidRequest(
                "the legacy functions/function_call fields are not supported; use tools", param="functions"
            )
    if isinstance(req, CompletionRequest):
        if req.echo:
            raise InvalidRequest("echo is not supported", param="echo")
        if req.suffix:
            raise InvalidRequest("suffix is not supported", param="suffix")
        if req.best_of not in (None, 1):
            raise InvalidRequest("best_of is not supported; use n", param="best_of")


def _asked(req: SamplingFields) -> int | None:
    if isinstance(req, ChatCompletionRequest) and req.max_completion_tokens is not None:
        return req.max_completion_tokens
    return req.max_tokens


def prompt_limit(req: SamplingFields, context_length: int) -> int:
    """The most prompt tokens that leave room for the reply (max_tokens, or at least one)."""
    return context_length - max(_asked(req) or 0, 1)


def prompt_too_long(req: SamplingFields, at_least: int, context_length: int, param: str) -> ContextLengthExceeded:
    """The answer to a prompt refused before it was tokenized in full: its size is a lower bound."""
    asked = _asked(req)
    reply = f" and max_tokens asks for {asked} more" if asked else ""
    return ContextLengthExceeded(
        f"the prompt has at least {at_least} tokens but the model's context length is {context_length}{reply}; "
        f"at most {prompt_limit(req, context_length)} prompt tokens fit: shorten or summarise the conversation",
        param=param,
    )


def max_new_tokens(req: SamplingFields, prompt_len: int, context_length: int, default: int | None) -> int:
    room = context_length - prompt_len
    if room <= 0:
        raise ContextLengthExceeded(
            f"the prompt is {prompt_len} tokens but the model's context length is {context_length}; "
            "shorten or summarise the conversation",
            param="messages",
        )
    asked = _asked(req)
    if asked is None:
        return min(room, default) if default is not None else room
    if asked > room:
        raise ContextLengthExceeded(
            f"this model's context length is {context_length} tokens; the prompt is {prompt_len} and "
            f"max_tokens asks for {asked} more; lower max_tokens to at most {room} or shorten the prompt",
            param="max_tokens",
        )
    return asked


def to_sglang(req: SamplingFields, *, max_tokens: int) -> dict[str, Any]:
    params: dict[str, Any] = {"max_new_tokens": max_tokens}
    for field, name in _PASS_THROUGH:
        value = getattr(req, field)
        if value is not None:
            params[name] = value
    stops = stop_strings(req)
    if stops:
        params["stop"] = stops
    return params
