"""`/v1/messages`: the Anthropic Messages front-end on the call pipeline (core/call_pipeline.py).

The request's blocks become the chat messages the template renders (anthropic/messages.py)
and are planned on the agent's token tree as chat calls are; the parsed reply (reasoning,
content, tool calls) is answered as thinking, text and tool_use blocks, or as Anthropic's
stream events.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from roost.rollout.chat.reply_parser import ParsedToolCall, ReplyEvent
from roost.rollout.gateway.anthropic.messages import ThinkingSigner, template_kwargs, to_template, tool_dicts
from roost.rollout.gateway.anthropic.options import clear_thinking, option_notes, output_constraint, reasoning_policy
from roost.rollout.gateway.anthropic.wire import MessagesRequest, PromptFields
from roost.rollout.gateway.core.call_pipeline import Outcome, Prepared
from roost.rollout.gateway.core.engine_context import EngineContext
from roost.rollout.gateway.core.errors import GatewayError, anthropic_body
from roost.rollout.gateway.core.image_parts import ImageInput, ImageParts
from roost.rollout.gateway.core.prompt_builder import PromptPlan
from roost.rollout.gateway.core.recording import CallTarget, new_id
from roost.rollout.gateway.core.sampling_params import max_new_tokens, prompt_limit, prompt_too_long
from roost.rollout.gateway.core.structured_outputs import constrained, messages_constraint, only_one
from roost.rollout.gateway.core.template_messages import TemplateCall, argument_defaults
from roost.rollout.gateway.openai.bodies import assistant_message
from roost.rollout.gateway.openai.chat_calls import plan_call, prompt_tail


def _input(call: ParsedToolCall) -> dict[str, Any]:
    """A tool call's arguments as a tool_use `input` (an object; anything else is wrapped)."""
    try:
        value = orjson.loads(call.arguments)
    except orjson.JSONDecodeError:
        return {"arguments": call.arguments}
    return value if isinstance(value, dict) else {"arguments": value}


def _sampling(req: MessagesRequest, max_tokens: int) -> dict[str, Any]:
    params: dict[str, Any] = {"max_new_tokens": max_tokens}
    for name in ("temperature", "top_p", "top_k", "custom_params"):
        value = getattr(req, name)
        if value is not None:
            params[name] = value
    if req.stop_sequences:
        params["stop"] = [s for s in req.stop_sequences if s]
    return params


def template_call(req: PromptFields, images: ImageParts, signer: ThinkingSigner) -> TemplateCall:
    """A Messages request's prompt in the template's terms: the thinking its clear_thinking edit
    clears taken out, `thinking: disabled` as the template's `enable_thinking=False`, its images
    collected in `images`."""
    messages = clear_thinking(req, to_template(req, images, signer))
    return TemplateCall(messages, tool_dicts(req), template_kwargs(req), images.images)


def stop_reason(o: Outcome) -> tuple[str, str | None]:
    """Anthropic's `stop_reason` and `stop_sequence` for a finished reply."""
    engine = o.sampled.finish_reason
    if engine.get("type") == "length":
        return "max_tokens", None
    if o.reply.tool_calls:
        return "tool_use", None
    matched = engine.get("matched")
    if isinstance(matched, str) and matched:
        return "stop_sequence", matched
    return "end_turn", None


class MessagesFront:
    """Anthropic Messages: blocks in, thinking/text/tool_use blocks out."""

    endpoint = "messages"
    passthrough_path = None  # the OpenAI pass-through does not speak this wire

    def __init__(self, signer: ThinkingSigner):
        self.signer = signer

    async def _plan(
        self,
        ctx: EngineContext,
        target: CallTarget,
        req: PromptFields,
        limit: int,
        raw_body: bytes,
        too_long: Callable[[int], GatewayError],
    ) -> tuple[PromptPlan, bytes, list[ImageInput]]:
        ctx.check_model(req.model)
        call = template_call(req, ctx.image_parts(), self.signer)
        policy = reasoning_policy(req, target.session.record.reasoning_policy)
        plan, chain_end = await plan_call(ctx, target, call, limit, len(raw_body), too_long, policy)
        return plan, chain_end, call.images

    async def prepare(
        self, ctx: EngineContext, target: CallTarget, req: MessagesRequest, raw_body: bytes, received: float
    ) -> Prepared:
        plan, chain_end, images = await self._plan(
            ctx,
            target,
            req,
            prompt_limit(req, ctx.context_length),
            raw_body,
            lambda at_least: prompt_too_long(req, at_least, ctx.context_length, "messages"),
        )
        limit = max_new_tokens(req, len(plan.prompt_ids), ctx.context_length, None)
        tools = tool_dicts(req)
        parse_tools = tools is not None and (req.tool_choice is None or req.tool_choice.type != "none")
        constraint = only_one(
            output_constraint(req),
            messages_constraint(tools, req.tool_choice, ctx.reply_format, prompt_tail(ctx, plan)),
        )
        return Prepared(
            req,
            target,
            req.model,
            plan,
            constrained(_sampling(req, limit), constraint),
            1,
            req.stream,
            list(req.stop_sequences or ()),
            raw_body,
            received,
            chain_end=chain_end,
            parse_tools=parse_tools,
            constraint=constraint.record() if constraint else None,
            argument_defaults=argument_defaults(tools),
            notes=option_notes(req),
            images=images,
        )

    async def count(self, ctx: EngineContext, target: CallTarget, req: PromptFields, raw_body: bytes) -> int:
        """The prompt tokens a Messages call with this prompt would send the engine."""
        plan, _, _ = await self._plan(
            ctx,
            target,
            req,
            ctx.context_length,
            raw_body,
            lambda at_least: prompt_too_long(req, at_least, ctx.context_length, "messages"),
        )
        return len(plan.prompt_ids)

    def tool_id(self) -> str:
        return f"toolu_{new_id()[:24]}"

    def key_messages(self, req: MessagesRequest) -> tuple[list | None, list | None]:
        return None, None  # never forwarded (passthrough_path is None)

    def content(self, o: Outcome) -> list[dict[str, Any]]:
        reply = o.reply
        blocks: list[dict[str, Any]] = []
        if reply.reasoning:
            blocks.append(
                {"type": "thinking", "thinking": reply.reasoning, "signature": self.signer.sign(reply.reasoning)}
            )
        if reply.content:
            blocks.append({"type": "text", "text": reply.content})
        for call, tool_id in zip(reply.tool_calls, o.tool_ids):
            blocks.append({"type": "tool_use", "id": tool_id, "name": call.name, "input": _input(call)})
        return blocks

    def record_response(self, p: Prepared, o: Outcome) -> dict[str, Any]:
        reason, sequence = stop_reason(o)
        return {
            "message": assistant_message(o.reply, o.tool_ids),
            "stop_reason": reason,
            "stop_sequence": sequence,
            "parse_failures": o.reply.failures,
        }

    def answer(self, ctx: EngineContext, p: Prepared, outcomes: list[Outcome]) -> dict[str, Any]:
        o = outcomes[0]
        reason, sequence = stop_reason(o)
        return {
            "id": f"msg_{o.call_id}",
            "type": "message",
            "role": "assistant",
            "model": p.model,
            "content": self.content(o),
            "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": usage(p, len(o.sampled.ids)),
        }

    def streamer(self, ctx: EngineContext, p: Prepared, call_id: str, weight_version: str) -> MessagesStreamer:
        return MessagesStreamer(self, p, call_id)


def usage(p: Prepared, output_tokens: int) -> dict[str, int]:
    """Anthropic's usage: `input_tokens` are the prompt tokens not reused from the agent's
    tree; the reused ones count as cache reads."""
    reused = p.plan.shared_prefix_len
    return {
        "input_tokens": len(p.plan.prompt_ids) - reused,
        "output_tokens": output_tokens,
        "cache_read_input_tokens": reused,
        "cache_creation_input_tokens": 0,
    }


def event(kind: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **payload}) + b"\n\n"


class MessagesStreamer:
    """Anthropic's event sequence: `message_start`, `ping`, per block `content_block_start`,
    `_delta`s (`thinking_delta` + `signature_delta`, `text_delta`, `input_json_delta`) and
    `_stop`, then `message_delta` (stop reason, usage) and `message_stop`."""

    def __init__(self, front: MessagesFront, p: Prepared, call_id: str):
        self.front, self.p, self.call_id = front, p, call_id
        self.index = -1
        self.open: str | None = None  # the type of the block being streamed
        self.thinking: list[str] = []

    def opening(self) -> list[bytes]:
        message = {
            "id": f"msg_{self.call_id}",
            "type": "message",
            "role": "assistant",
            "model": self.p.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage(self.p, 0),
        }
        return [event("message_start", {"message": message}), event("ping", {})]

    def _start(self, block: dict[str, Any]) -> list[bytes]:
        frames = self._stop()
        self.index += 1
        self.open = block["type"]
        return frames + [event("content_block_start", {"index": self.index, "content_block": block})]

    def _stop(self) -> list[bytes]:
        if self.open is None:
            return []
        frames = []
        if self.open == "thinking":
            signature = self.front.signer.sign("".join(self.thinking))
            frames.append(self._delta({"type": "signature_delta", "signature": signature}))
        self.open = None
        return frames + [event("content_block_stop", {"index": self.index})]

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return event("content_block_delta", {"index": self.index, "delta": delta})

    def event(self, ev: ReplyEvent, tool_id: str | None) -> list[bytes]:
        if ev.kind == "tool_call":
            block = {"type": "tool_use", "id": tool_id, "name": ev.call.name, "input": {}}
            arguments = orjson.dumps(_input(ev.call)).decode()
            return (
                self._start(block)
                + [self._delta({"type": "input_json_delta", "partial_json": arguments})]
                + self._stop()
            )
        if ev.kind == "reasoning" and ev.text:
            frames = (
                [] if self.open == "thinking" else self._start({"type": "thinking", "thinking": "", "signature": ""})
            )
            self.thinking.append(ev.text)
            return frames + [self._delta({"type": "thinking_delta", "thinking": ev.text})]
        if ev.kind == "content" and ev.text:
            frames = [] if self.open == "text" else self._start({"type": "text", "text": ""})
            return frames + [self._delta({"type": "text_delta", "text": ev.text})]
        return []

    def closing(self, o: Outcome) -> list[bytes]:
        reason, sequence = stop_reason(o)
        return self._stop() + [
            event(
                "message_delta",
                {
                    "delta": {"stop_reason": reason, "stop_sequence": sequence},
                    "usage": {"output_tokens": len(o.sampled.ids)},
                },
            ),
            event("message_stop", {}),
        ]

    def failure(self, error: GatewayError) -> bytes:
        return b"event: error\ndata: " + anthropic_body(error) + b"\n\n"
