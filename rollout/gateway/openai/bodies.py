"""OpenAI response bodies and stream chunks, built as plain dicts for orjson."""

from __future__ import annotations

from typing import Any

import orjson

from roost.rollout.chat.reply_parser import ParsedReply, ParsedToolCall

SSE_DONE = b"data: [DONE]\n\n"


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def finish_reason(engine_reason: dict[str, Any], has_tool_calls: bool) -> str:
    kind = engine_reason.get("type")
    if kind == "length":
        return "length"
    return "tool_calls" if has_tool_calls else "stop"


def tool_call_dict(call: ParsedToolCall, call_id: str, index: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
    if index is not None:
        out = {"index": index, **out}
    return out


def assistant_message(reply: ParsedReply, call_ids: list[str]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning is not None:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [tool_call_dict(c, i) for c, i in zip(reply.tool_calls, call_ids)]
    return message


def chat_logprobs(tokens: list[str], logprobs: list[float]) -> dict[str, Any]:
    return {
        "content": [
            {"token": t, "logprob": lp, "bytes": list(t.encode("utf-8", "replace")), "top_logprobs": []}
            for t, lp in zip(tokens, logprobs)
        ]
    }


def completion_logprobs(tokens: list[str], logprobs: list[float]) -> dict[str, Any]:
    offsets, at = [], 0
    for t in tokens:
        offsets.append(at)
        at += len(t)
    return {
        "tokens": tokens,
        "token_logprobs": logprobs,
        "text_offset": offsets,
        "top_logprobs": None,
    }  # no alternatives are computed; OpenAI's type wants dicts or null


def usage(prompt_tokens: int, completion_tokens: int, reused: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": reused},
    }


def chunk(
    kind: str,
    response_id: str,
    created: int,
    model: str,
    fingerprint: str,
    choices: list[dict[str, Any]],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body = {
        "id": response_id,
        "object": kind,
        "created": created,
        "model": model,
        "system_fingerprint": fingerprint,
        "choices": choices,
    }
    if extra:
        body.update(extra)
    return body
