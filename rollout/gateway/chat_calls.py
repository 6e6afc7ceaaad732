"""`/v1/chat/completions` on a token engine (embedded or SGLang), streamed or not.

One call: render the messages with the model's template, build prompt ids by reusing the
agent's token tree (prompt_builder.py), generate, parse the reply into content, reasoning
and tool calls, commit the call to the store, and only then answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive

from ..chat.detokenize import IncrementalDecoder
from ..chat.reply_parser import ReplyEvent, ReplyParser
from ..chat.template import TemplateRenderError
from ..chat.tokenizer import TooManyTokens
from ..sglang_client import EngineError
from .engine_context import EngineContext
from .errors import BackendUnavailable, InvalidRequest, engine_failure
from .messages import chain_keys, header_key, message_key, to_template, tool_dicts
from .prompt_builder import PromptBuilder, PromptPlan
from .recording import (
    CallTarget, Sampled, build_reply, call_record, new_id, node_for, timings,
)
from .responses import SSE_DONE, chat_logprobs, chunk, finish_reason, sse, tool_call_dict, usage
from .sampling_params import max_new_tokens, prompt_limit, prompt_too_long, refuse_unsupported, stop_strings, to_sglang
from .stop_strings import StopTrimmer, trim_stop
from .token_tree import AgentTree
from .wire import ChatCompletionRequest, ChatMessage, Tool


@dataclass
class PreparedChat:
    req: ChatCompletionRequest
    target: CallTarget
    plan: PromptPlan
    chain_end: bytes
    params: dict[str, Any]
    parse_tools: bool
    raw_body: bytes
    received: float


def plan_chat(builder: PromptBuilder, tree: AgentTree, messages: list[ChatMessage], tools: list[Tool] | None,
              template_kwargs: dict[str, Any] | None, policy: str,
              limit: int | None = None) -> tuple[PromptPlan, bytes, str]:
    """Render the messages and plan the prompt ids; answers the plan, the messages' key and
    the rendered text. Raises TooManyTokens as soon as the prompt is known to pass `limit`
    tokens: before rendering when the contents alone are too long, else while tokenizing."""
    dicts = to_template(messages)
    if limit is not None:
        # Templates render user, system and tool contents whole (assistant turns they may trim).
        chars = sum(len(m["content"]) for m in dicts if m["role"] != "assistant")
        at_least = builder.tokenizer.tokens_at_least(chars)
        if at_least > limit:
            raise TooManyTokens(at_least, limit)
    chain, text = render_chat(builder, dicts, tool_dicts(tools), template_kwargs or None)
    return builder.build_chat(tree, chain, text, policy, limit), chain[-1], text


def render_chat(builder: PromptBuilder, dicts: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                template_kwargs: dict[str, Any] | None) -> tuple[list[bytes], str]:
    """Template messages rendered (with a generation prompt) as a call's prompt, and their
    chain keys."""
    chain = chain_keys(header_key(tools, template_kwargs), [message_key(m) for m in dicts])
    try:
        return chain, builder.render(chain[-1], dicts, tools, template_kwargs)
    except TemplateRenderError as exc:
        raise InvalidRequest(str(exc), param="messages") from exc


class ChatCalls:
    def __init__(self, ctx: EngineContext):
        self.ctx = ctx

    async def prepare(self, target: CallTarget, req: ChatCompletionRequest, raw_body: bytes,
                      received: float) -> PreparedChat:
        ctx = self.ctx
        refuse_unsupported(req)
        ctx.check_model(req.model)
        policy = target.session.record.reasoning_policy
        tree = target.session.tree(target.agent)
        try:
            plan, chain_end, _ = await ctx.off_loop(
                len(raw_body), plan_chat, ctx.builder, tree, req.messages, req.tools, req.chat_template_kwargs,
                policy, prompt_limit(req, ctx.context_length))
        except TooManyTokens as exc:
            raise prompt_too_long(req, exc.at_least, ctx.context_length, "messages") from None
        if plan.mismatch is not None:
            ctx.metrics.reasoning_mismatches.inc(policy)
        limit = max_new_tokens(req, len(plan.prompt_ids), ctx.context_length, ctx.config.default_max_tokens)
        params = to_sglang(req, max_tokens=limit)
        parse_tools = bool(req.tools) and req.tool_choice != "none"
        return PreparedChat(req, target, plan, chain_end, params, parse_tools, raw_body, received)

    def _parser(self, p: PreparedChat) -> ReplyParser:
        return ReplyParser(self.ctx.reply_format, parse_tools=p.parse_tools)

    async def _record(self, p: PreparedChat, call_id: str, sampled: Sampled, events: list[ReplyEvent],
                      tool_ids: list[str], started: float, engine_done: float) -> tuple[dict[str, Any], str]:
        """Store the call (committed on return) and add it to the agent's tree."""
        ctx = self.ctx
        reply, message, reply_key = build_reply(events, tool_ids, p.chain_end)
        if reply.failures:
            ctx.metrics.tool_parse_failures.inc(amount=len(reply.failures))
        reason = finish_reason(sampled.finish_reason, bool(reply.tool_calls))
        record = call_record(
            call_id=call_id, target=p.target, endpoint="chat", backend=ctx.config.backend, model=p.req.model,
            plan=p.plan, sampled=sampled, sampling_params=p.params, request=orjson.Fragment(p.raw_body),
            response={"message": message, "finish_reason": reason, "parse_failures": reply.failures},
            timings=timings(p.received, started, engine_done, time.perf_counter()), reply_key=reply_key,
        )
        await ctx.record(record)
        p.target.session.tree(p.target.agent).add(node_for(call_id, p.plan, sampled, ctx.tokenizer, reply_key))
        ctx.count_call("chat", p.plan, sampled)
        return message, reason

    async def complete(self, p: PreparedChat, receive: Receive) -> Response:
        ctx = self.ctx
        call_ids = [new_id() for _ in range(p.req.n)]
        started = time.perf_counter()
        try:
            generations = await ctx.generate("chat", p.plan.prompt_ids.tolist(), p.params, call_ids, receive)
        except EngineError as exc:
            raise engine_failure(exc, ctx.metrics, ctx.config.retry_after_s) from exc
        engine_done = time.perf_counter()
        if any(gen.finish_reason.get("type") == "abort" for gen in generations):
            raise BackendUnavailable("the engine aborted the generation (paused or restarting?); retry",
                                     retry_after_s=ctx.config.retry_after_s, code="engine_aborted")
        choices = []
        recorded = []
        for index, (cid, gen) in enumerate(zip(call_ids, generations)):
            sampled = ctx.sampled_from(gen)
            text = trim_stop(ctx.tokenizer.decode(sampled.ids, skip_special_tokens=True), sampled.finish_reason)
            parser = self._parser(p)
            events = parser.feed(text) + parser.finish()
            tool_ids = [tool_call_id() for e in events if e.kind == "tool_call"]
            recorded.append(self._record(p, cid, sampled, events, tool_ids, started, engine_done))
            choices.append((index, sampled))
        results = [await recorded[0]] if len(recorded) == 1 else await asyncio.gather(*recorded)
        out_choices = []
        for (index, sampled), (message, reason) in zip(choices, results):
            choice: dict[str, Any] = {"index": index, "message": message, "logprobs": None, "finish_reason": reason}
            if p.req.logprobs:
                choice["logprobs"] = chat_logprobs(ctx.token_strings(sampled.ids), sampled.logprobs.tolist())
            if p.req.return_token_ids:
                choice["token_ids"] = sampled.ids.tolist()
            out_choices.append(choice)
        completion_tokens = sum(len(s.ids) for _, s in choices)
        body: dict[str, Any] = {
            "id": f"chatcmpl-{call_ids[0]}", "object": "chat.completion", "created": int(time.time()),
            "model": p.req.model, "system_fingerprint": f"roost-{choices[0][1].weight_version}",
            "choices": out_choices,
            "usage": usage(len(p.plan.prompt_ids), completion_tokens, p.plan.shared_prefix_len),
        }
        if p.req.return_token_ids:
            body["prompt_token_ids"] = p.plan.prompt_ids.tolist()
        ctx.observe("chat", p.received, engine_done - started)
        return Response(orjson.dumps(body), media_type="application/json",
                        headers=ctx.call_headers(p.target, call_ids, engine_done - started))

    async def stream(self, p: PreparedChat, release: Any) -> Response:
        """Open the engine stream before answering, so an engine failure is a plain 503."""
        ctx = self.ctx
        call_id = new_id()
        started = time.perf_counter()
        engine_stream = ctx.client.generate_stream(p.plan.prompt_ids.tolist(), p.params, rid=call_id)
        try:
            first = await anext(engine_stream)
        except StopAsyncIteration:
            await engine_stream.aclose()
            raise BackendUnavailable("the engine closed the stream without a token; retry",
                                     retry_after_s=ctx.config.retry_after_s, code="engine_protocol_error") from None
        except EngineError as exc:
            await engine_stream.aclose()
            raise engine_failure(exc, ctx.metrics, ctx.config.retry_after_s) from exc
        chunks = self._chunks(p, call_id, first, engine_stream, started, release)
        return StreamingResponse(chunks, media_type="text/event-stream",
                                 headers=ctx.call_headers(p.target, [call_id]))

    async def _chunks(self, p: PreparedChat, call_id: str, first: Any, engine_stream: AsyncIterator,
                      started: float, release: Any) -> AsyncIterator[bytes]:
        ctx = self.ctx
        rid, created = f"chatcmpl-{call_id}", int(time.time())
        fingerprint = f"roost-{first.weight_version}"

        def frame(delta: dict[str, Any], reason: str | None = None, choice_extra: dict | None = None,
                  body_extra: dict | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason, **(choice_extra or {})}
            return sse(chunk("chat.completion.chunk", rid, created, p.req.model, fingerprint, [choice], body_extra))

        sampled = Sampled()
        decoder = IncrementalDecoder(ctx.tokenizer)
        trimmer = StopTrimmer(stop_strings(p.req))
        parser = self._parser(p)
        events: list[ReplyEvent] = []
        tool_ids: list[str] = []
        try:
            yield frame({"role": "assistant", "content": ""})
            delta = first
            while True:
                sampled.ids.extend(delta.output_ids)
                sampled.logprobs.extend(delta.output_logprobs)
                sampled.weight_version = delta.weight_version
                text = trimmer.feed(decoder.push(delta.output_ids))
                new = parser.feed(text) if text else []
                if delta.finish_reason is not None:
                    sampled.finish_reason = delta.finish_reason
                    tail = trimmer.feed(decoder.flush()) + trimmer.finish(delta.finish_reason)
                    new += parser.feed(tail) + parser.finish()
                events.extend(new)
                for event in new:
                    if event.kind == "tool_call":
                        tool_ids.append(tool_call_id())
                        call = tool_call_dict(event.call, tool_ids[-1], index=len(tool_ids) - 1)
                        yield frame({"tool_calls": [call]})
                    elif event.kind in ("content", "reasoning"):
                        field = "content" if event.kind == "content" else "reasoning_content"
                        yield frame({field: event.text})
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
            _, reason = await self._record(p, call_id, sampled, events, tool_ids, started, engine_done)
            choice_extra = {"token_ids": sampled.ids.tolist()} if p.req.return_token_ids else None
            body_extra = {"prompt_token_ids": p.plan.prompt_ids.tolist()} if p.req.return_token_ids else None
            yield frame({}, reason, choice_extra, body_extra)
            if p.req.stream_options is not None and p.req.stream_options.include_usage:
                yield sse(chunk("chat.completion.chunk", rid, created, p.req.model, fingerprint, [],
                                {"usage": usage(len(p.plan.prompt_ids), len(sampled.ids), p.plan.shared_prefix_len)}))
            yield SSE_DONE
            ctx.observe("chat", p.received, engine_done - started)
        except EngineError as exc:
            # Headers are out: the failure can only be reported inside the stream. The call
            # is not recorded, as no complete reply was returned.
            yield b"data: " + engine_failure(exc, ctx.metrics, ctx.config.retry_after_s).body() + b"\n\n"
        except BackendUnavailable as error:
            ctx.metrics.engine_errors.inc(error.code)
            yield b"data: " + error.body() + b"\n\n"
        except (asyncio.CancelledError, GeneratorExit):
            ctx.metrics.calls_aborted.inc("chat")  # the client left mid-stream: nothing recorded
            raise
        finally:
            release()
            await engine_stream.aclose()


def tool_call_id() -> str:
    return f"call_{new_id()[:24]}"
