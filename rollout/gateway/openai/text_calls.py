"""`/v1/completions`: the text wire's front-end on the call pipeline (core/call_pipeline.py).

A raw prompt, no template: a text prompt is tokenized as is (no special tokens added); a
list of ids is sent to the engine unchanged, which is the way to drive the engine
token-exactly from outside. The reply is text, not parsed.
"""

from __future__ import annotations

from array import array
from typing import Any

from roost.rollout.chat.reply_parser import ReplyEvent
from roost.rollout.chat.tokenizer import TooManyTokens
from roost.rollout.gateway.core.call_pipeline import Outcome, Prepared
from roost.rollout.gateway.core.engine_context import EngineContext
from roost.rollout.gateway.core.errors import InvalidRequest
from roost.rollout.gateway.core.recording import CallTarget
from roost.rollout.gateway.core.sampling_params import (
    max_new_tokens,
    prompt_limit,
    prompt_too_long,
    stop_strings,
    to_sglang,
)
from roost.rollout.gateway.core.structured_outputs import constrained, from_allowed_replies
from roost.rollout.gateway.openai.bodies import completion_logprobs
from roost.rollout.gateway.openai.front import OpenAIFront, OpenAIStreamer
from roost.rollout.gateway.openai.wire import CompletionRequest


def _prompt_ids(req: CompletionRequest, ctx: EngineContext) -> array:
    prompt = req.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (list, str)):
        if len(prompt) != 1:
            raise InvalidRequest("send one prompt per request (batched prompts are not supported)", param="prompt")
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise InvalidRequest("prompt is empty", param="prompt")
        tokenizer = ctx.tokenizer
        # A raw prompt is the client's own rendering: its control-token spellings are meant.
        return tokenizer.encode_array(tokenizer.control.literal(prompt), prompt_limit(req, ctx.context_length))
    if not prompt:
        raise InvalidRequest("prompt is empty", param="prompt")
    vocab = ctx.tokenizer.vocab_size
    bad = [t for t in prompt if not 0 <= t < vocab]
    if bad:
        raise InvalidRequest(f"prompt token ids {bad[:5]} are outside the vocabulary (0..{vocab - 1})", param="prompt")
    return array("i", prompt)


class TextFront(OpenAIFront):
    """Text completions: a raw prompt in, its continuation out as text (with special tokens
    when `skip_special_tokens` is false)."""

    endpoint, passthrough_path = "completions", "completions"
    object, id_prefix = "text_completion", "cmpl"

    async def plan(
        self, ctx: EngineContext, target: CallTarget, req: CompletionRequest, raw_body: bytes, received: float
    ) -> Prepared:
        try:
            ids = await ctx.off_loop(len(raw_body), _prompt_ids, req, ctx)
        except TooManyTokens as exc:
            raise prompt_too_long(req, exc.at_least, ctx.context_length, "prompt") from None
        plan = ctx.builder.build_text(target.session.tree(target.agent), ids)
        limit = max_new_tokens(req, len(ids), ctx.context_length, ctx.config.default_max_tokens)
        skip = req.skip_special_tokens if req.skip_special_tokens is not None else True
        constraint = from_allowed_replies(req.allowed_replies)
        return Prepared(
            req,
            target,
            req.model,
            plan,
            constrained(to_sglang(req, max_tokens=limit), constraint),
            req.n,
            req.stream,
            stop_strings(req),
            raw_body,
            received,
            parse_reply=False,
            skip_special_tokens=skip,
            constraint=constraint.record() if constraint else None,
        )

    def tool_id(self) -> str:
        raise RuntimeError("a raw prompt's reply is not parsed, so it has no tool calls to name")

    def key_messages(self, req: CompletionRequest) -> tuple[list | None, list | None]:
        return None, None

    def reason(self, o: Outcome) -> str:
        return "length" if o.sampled.finish_reason.get("type") == "length" else "stop"

    def payload(self, o: Outcome) -> dict[str, Any]:
        return {"text": o.reply.content or ""}

    def logprobs(self, ctx: EngineContext, o: Outcome) -> dict[str, Any]:
        return completion_logprobs(ctx.token_strings(o.sampled.ids), o.sampled.logprobs.tolist())

    def record_response(self, p: Prepared, o: Outcome) -> dict[str, Any]:
        return {**self.payload(o), "finish_reason": self.reason(o)}

    def streamer(self, ctx: EngineContext, p: Prepared, call_id: str, weight_version: str) -> TextStreamer:
        return TextStreamer(self, ctx, p, call_id, weight_version)


class TextStreamer(OpenAIStreamer):
    """`text_completion` chunks of text."""

    kind = "text_completion"

    def opening(self) -> list[bytes]:
        return []

    def event(self, event: ReplyEvent, tool_id: str | None) -> list[bytes]:
        return [self.chunk([{"index": 0, "text": event.text, "logprobs": None, "finish_reason": None}])]

    def last_choice(self, o: Outcome) -> dict[str, Any]:
        return {"index": 0, "text": ""}
