"""`/v1/completions` on a token engine: a raw prompt (text or token ids), no template.

A text prompt is tokenized as is (no special tokens added); a list of ids is sent to the
engine unchanged, which is the way to drive the engine token-exactly from outside.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive

from ..chat.detokenize import IncrementalDecoder
from ..chat.tokenizer import TooManyTokens
from ..sglang_client import EngineError
from .engine_context import EngineContext
from .errors import BackendUnavailable, InvalidRequest, engine_failure
from .prompt_builder import PromptPlan
from .recording import CallTarget, Sampled, call_record, new_id, node_for, timings
from .responses import SSE_DONE, chunk, completion_logprobs, sse, usage
from .sampling_params import max_new_tokens, prompt_limit, prompt_too_long, refuse_unsupported, stop_strings, to_sglang
from .stop_strings import StopTrimmer, trim_stop
from .wire import CompletionRequest


@dataclass
class PreparedText:
    req: CompletionRequest
    target: CallTarget
    plan: PromptPlan
    params: dict[str, Any]
    raw_body: bytes
    received: float


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


class TextCalls:
    def __init__(self, ctx: EngineContext):
        self.ctx = ctx

    async def prepare(self, target: CallTarget, req: CompletionRequest, raw_body: bytes,
                      received: float) -> PreparedText:
        ctx = self.ctx
        refuse_unsupported(req)
        ctx.check_model(req.model)
        try:
            ids = await ctx.off_loop(len(raw_body), _prompt_ids, req, ctx)
        except TooManyTokens as exc:
            raise prompt_too_long(req, exc.at_least, ctx.context_length, "prompt") from None
        plan = ctx.builder.build_text(target.session.tree(target.agent), ids)
        limit = max_new_tokens(req, len(ids), ctx.context_length, ctx.config.default_max_tokens)
        return PreparedText(req, target, plan, to_sglang(req, max_tokens=limit), raw_body, received)

    def _text(self, p: PreparedText, sampled: Sampled) -> str:
        skip = p.req.skip_special_tokens if p.req.skip_special_tokens is not None else True
        return trim_stop(self.ctx.tokenizer.decode(sampled.ids, skip_special_tokens=skip), sampled.finish_reason)

    async def _record(self, p: PreparedText, call_id: str, sampled: Sampled, text: str, started: float,
                      engine_done: float) -> str:
        ctx = self.ctx
        reason = "length" if sampled.finish_reason.get("type") == "length" else "stop"
        record = call_record(
            call_id=call_id, target=p.target, endpoint="completions", backend=ctx.config.backend,
            model=p.req.model, plan=p.plan, sampled=sampled, sampling_params=p.params,
            request=orjson.Fragment(p.raw_body), response={"text": text, "finish_reason": reason},
            timings=timings(p.received, started, engine_done, time.perf_counter()), reply_key=None,
        )
        await ctx.record(record)
        p.target.session.tree(p.target.agent).add(node_for(call_id, p.plan, sampled, ctx.tokenizer, None))
        ctx.count_call("completions", p.plan, sampled)
        return reason

    async def complete(self, p: PreparedText, receive: Receive) -> Response:
        ctx = self.ctx
        call_ids = [new_id() for _ in range(p.req.n)]
        started = time.perf_counter()
        choices = []
        try:
            generations = await ctx.generate("completions", p.plan.prompt_ids.tolist(), p.params, call_ids, receive)
        except EngineError as exc:
            raise engine_failure(exc, ctx.metrics, ctx.config.retry_after_s) from exc
        engine_done = time.perf_counter()
        if any(gen.finish_reason.get("type") == "abort" for gen in generations):
            raise BackendUnavailable("the engine aborted the generation (paused or restarting?); retry",
                                     retry_after_s=ctx.config.retry_after_s, code="engine_aborted")
        for index, (cid, gen) in enumerate(zip(call_ids, generations)):
            sampled = ctx.sampled_from(gen)
            text = self._text(p, sampled)
            reason = await self._record(p, cid, sampled, text, started, engine_done)
            choice: dict[str, Any] = {"index": index, "text": text, "logprobs": None, "finish_reason": reason}
            if p.req.logprobs:
                choice["logprobs"] = completion_logprobs(ctx.token_strings(sampled.ids), sampled.logprobs.tolist())
            if p.req.return_token_ids:
                choice["token_ids"] = sampled.ids.tolist()
            choices.append((choice, len(sampled.ids)))
        body: dict[str, Any] = {
            "id": f"cmpl-{call_ids[0]}", "object": "text_completion", "created": int(time.time()),
            "model": p.req.model, "system_fingerprint": f"roost-{generations[0].weight_version}",
            "choices": [c for c, _ in choices],
            "usage": usage(len(p.plan.prompt_ids), sum(n for _, n in choices), p.plan.shared_prefix_len),
        }
        if p.req.return_token_ids:
            body["prompt_token_ids"] = p.plan.prompt_ids.tolist()
        ctx.observe("completions", p.received, engine_done - started)
        return Response(orjson.dumps(body), media_type="application/json",
                        headers=ctx.call_headers(p.target, call_ids, engine_done - started))

    async def stream(self, p: PreparedText, release: Any) -> Response:
        ctx = self.ctx
        call_id = new_id()
        started = time.perf_counter()
        engine_stream = ctx.client.generate_stream(p.plan.prompt_ids.tolist(), p.params, rid=call_id)
        try:
            first = await anext(engine_stream)
        except StopAsyncIteration:
            await engine_stream.aclose()
            raise BackendUnavailable("the engine closed the stream without a token; retry",
                                     code="engine_protocol_error") from None
        except EngineError as exc:
            await engine_stream.aclose()
            raise engine_failure(exc, ctx.metrics, ctx.config.retry_after_s) from exc
        return StreamingResponse(self._chunks(p, call_id, first, engine_stream, started, release),
                                 media_type="text/event-stream", headers=ctx.call_headers(p.target, [call_id]))

    async def _chunks(self, p: PreparedText, call_id: str, first: Any, engine_stream: AsyncIterator,
                      started: float, release: Any) -> AsyncIterator[bytes]:
        ctx = self.ctx
        rid, created, fingerprint = f"cmpl-{call_id}", int(time.time()), f"roost-{first.weight_version}"

        def frame(text: str, reason: str | None = None, choice_extra: dict | None = None) -> bytes:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason, **(choice_extra or {})}
            return sse(chunk("text_completion", rid, created, p.req.model, fingerprint, [choice]))

        skip = p.req.skip_special_tokens if p.req.skip_special_tokens is not None else True
        decoder = IncrementalDecoder(ctx.tokenizer, skip_special_tokens=skip)
        trimmer = StopTrimmer(stop_strings(p.req))
        sampled = Sampled()
        pieces: list[str] = []
        try:
            delta = first
            while True:
                sampled.ids.extend(delta.output_ids)
                sampled.logprobs.extend(delta.output_logprobs)
                sampled.weight_version = delta.weight_version
                text = trimmer.feed(decoder.push(delta.output_ids))
                if delta.finish_reason is not None:
                    sampled.finish_reason = delta.finish_reason
                    text += trimmer.feed(decoder.flush()) + trimmer.finish(delta.finish_reason)
                if text:
                    pieces.append(text)
                    yield frame(text)
                if delta.finish_reason is not None:
                    break
                try:
                    delta = await anext(engine_stream)
                except StopAsyncIteration:
                    raise BackendUnavailable("the engine stream ended before a finish reason",
                                             code="engine_protocol_error") from None
            engine_done = time.perf_counter()
            if sampled.finish_reason.get("type") == "abort":
                raise BackendUnavailable("the engine aborted the generation (paused or restarting?); retry",
                                         code="engine_aborted")
            reason = await self._record(p, call_id, sampled, "".join(pieces), started, engine_done)
            extra = {"token_ids": sampled.ids.tolist(), "prompt_token_ids": p.plan.prompt_ids.tolist()} \
                if p.req.return_token_ids else None
            yield frame("", reason, extra)
            if p.req.stream_options is not None and p.req.stream_options.include_usage:
                yield sse(chunk("text_completion", rid, created, p.req.model, fingerprint, [],
                                {"usage": usage(len(p.plan.prompt_ids), len(sampled.ids), p.plan.shared_prefix_len)}))
            yield SSE_DONE
            ctx.observe("completions", p.received, engine_done - started)
        except EngineError as exc:
            yield b"data: " + engine_failure(exc, ctx.metrics, ctx.config.retry_after_s).body() + b"\n\n"
        except BackendUnavailable as error:
            ctx.metrics.engine_errors.inc(error.code)
            yield b"data: " + error.body() + b"\n\n"
        except (asyncio.CancelledError, GeneratorExit):
            ctx.metrics.calls_aborted.inc("completions")  # the client left mid-stream: nothing recorded
            raise
        finally:
            release()
            await engine_stream.aclose()
