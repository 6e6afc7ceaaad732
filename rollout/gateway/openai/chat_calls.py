"""`/v1/chat/completions`: the chat wire's front-end on the call pipeline (core/call_pipeline.py).

It renders the messages with the model's template and plans the prompt on the agent's token
tree (prompt_builder.py), and formats the parsed reply (content, reasoning, tool calls) as an
OpenAI chat completion or its stream chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from roost.rollout.chat.reply_parser import ReplyEvent
from roost.rollout.chat.template import TemplateRenderError
from roost.rollout.chat.tokenizer import TooManyTokens
from roost.rollout.gateway.core.call_pipeline import Outcome, Prepared
from roost.rollout.gateway.core.engine_context import EngineContext
from roost.rollout.gateway.core.errors import GatewayError, InvalidRequest
from roost.rollout.gateway.core.image_parts import ImageInput, ImageParts
from roost.rollout.gateway.core.passthrough import template_messages
from roost.rollout.gateway.core.prompt_builder import ImagesNotRendered, PromptBuilder, PromptPlan
from roost.rollout.gateway.core.recording import CallTarget, new_id
from roost.rollout.gateway.core.sampling_params import (
    max_new_tokens,
    prompt_limit,
    prompt_too_long,
    stop_strings,
    to_sglang,
)
from roost.rollout.gateway.core.structured_outputs import chat_constraint, constrained
from roost.rollout.gateway.core.template_messages import (
    TemplateCall,
    argument_defaults,
    chain_keys,
    extend_chain,
    header_key,
    message_key,
    text_chars,
    to_template,
    tool_dicts,
    tool_notes,
)
from roost.rollout.gateway.core.token_tree import AgentTree
from roost.rollout.gateway.openai.bodies import assistant_message, chat_logprobs, finish_reason, tool_call_dict
from roost.rollout.gateway.openai.front import OpenAIFront, OpenAIStreamer
from roost.rollout.gateway.openai.wire import ChatCompletionRequest

TAIL_TOKENS = 8  # enough for Qwen3's closed reasoning block, "<think>\n\n</think>\n\n"


def plan_template(
    builder: PromptBuilder,
    tree: AgentTree,
    dicts: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    template_kwargs: dict[str, Any] | None,
    policy: str,
    limit: int | None = None,
    images: Sequence[ImageInput] = (),
) -> tuple[PromptPlan, bytes, str]:
    """Render template messages (every wire maps onto them) and plan the prompt ids on `tree`;
    answers the plan, the messages' chain key and the rendered text. Raises TooManyTokens as soon
    as the prompt is known to pass `limit` tokens: before rendering when the contents alone are
    too long, else while tokenizing; `images`: the messages' images, in order."""
    if limit is not None:
        # Templates render user, system and tool contents whole (assistant turns they may trim).
        chars = sum(text_chars(m["content"]) for m in dicts if m["role"] != "assistant")
        at_least = builder.tokenizer.tokens_at_least(chars)
        if at_least > limit:
            raise TooManyTokens(at_least, limit)
    chain, text = render_chat(builder, dicts, tools, template_kwargs or None)
    plan = builder.build_chat(tree, chain, text, policy, limit, [image.prompt for image in images])
    return plan, chain[-1], text


def render_chat(
    builder: PromptBuilder,
    dicts: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    template_kwargs: dict[str, Any] | None,
) -> tuple[list[bytes], str]:
    """Template messages rendered (with a generation prompt) as a call's prompt, and their
    chain keys."""
    defaults = argument_defaults(tools)
    chain = chain_keys(header_key(tools, template_kwargs), [message_key(m, defaults) for m in dicts])
    # Keys leave reasoning out (harnesses drop it; clear_thinking clears it); the rendering
    # does not, so the render cache tells them apart.
    reasoning = orjson.dumps([m.get("reasoning_content") for m in dicts if m["role"] == "assistant"])
    try:
        return chain, builder.render(extend_chain(chain[-1], reasoning), dicts, tools, template_kwargs)
    except TemplateRenderError as exc:
        raise InvalidRequest(str(exc), param="messages") from exc


async def plan_call(
    ctx: EngineContext,
    target: CallTarget,
    call: TemplateCall,
    limit: int,
    body_bytes: int,
    too_long: Callable[[int], GatewayError],
    policy: str | None = None,
) -> tuple[PromptPlan, bytes]:
    """Plan a templated call on its agent's tree (off the loop when big); `too_long(at_least)`
    is the error for a prompt known to pass `limit` tokens; `policy`: the call's reasoning
    policy where the request chose one (default: the session's)."""
    policy = policy or target.session.record.reasoning_policy
    tree = target.session.tree(target.agent)
    try:
        plan, chain_end, _ = await ctx.off_loop(
            body_bytes,
            plan_template,
            ctx.builder,
            tree,
            call.messages,
            call.tools,
            call.template_kwargs,
            policy,
            limit,
            call.images,
        )
    except TooManyTokens as exc:
        raise too_long(exc.at_least) from None
    except ImagesNotRendered as exc:
        raise InvalidRequest(f"the images cannot be placed in the prompt: {exc}", param="messages") from None
    if plan.mismatch is not None:
        ctx.metrics.reasoning_mismatches.labels(policy).inc()
    return plan, chain_end


def template_call(req: ChatCompletionRequest, images: ImageParts) -> TemplateCall:
    """A chat completion request in the template's terms."""
    messages = to_template(req.messages, images.model, images)
    return TemplateCall(messages, tool_dicts(req.tools), req.chat_template_kwargs, images.images)


def prompt_tail(ctx: EngineContext, plan: PromptPlan) -> str:
    """The planned prompt's last characters: where they leave the reasoning block."""
    return ctx.tokenizer.decode(plan.prompt_ids[-TAIL_TOKENS:])


def tool_call_id() -> str:
    return f"call_{new_id()[:24]}"


class ChatFront(OpenAIFront):
    """Chat completions: templated messages in; content, reasoning and tool calls out."""

    endpoint = "chat"
    passthrough_path = "chat/completions"
    object = "chat.completion"
    id_prefix = "chatcmpl"

    async def plan(
        self, ctx: EngineContext, target: CallTarget, req: ChatCompletionRequest, raw_body: bytes, received: float
    ) -> Prepared:
        call = template_call(req, ctx.image_parts())
        tools = call.tools
        plan, chain_end = await plan_call(
            ctx,
            target,
            call,
            prompt_limit(req, ctx.context_length),
            len(raw_body),
            lambda at_least: prompt_too_long(req, at_least, ctx.context_length, "messages"),
        )
        limit = max_new_tokens(req, len(plan.prompt_ids), ctx.context_length, ctx.config.default_max_tokens)
        constraint = chat_constraint(req, ctx.reply_format, prompt_tail(ctx, plan))
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
            chain_end=chain_end,
            parse_tools=tools is not None and req.tool_choice != "none",
            constraint=constraint.record() if constraint else None,
            argument_defaults=argument_defaults(tools),
            notes=tool_notes(req.tools),
            images=call.images,
        )

    def tool_id(self) -> str:
        return tool_call_id()

    def key_messages(self, req: ChatCompletionRequest) -> tuple[list | None, list | None]:
        return template_messages(req)

    def reason(self, o: Outcome) -> str:
        return finish_reason(o.sampled.finish_reason, bool(o.reply.tool_calls))

    def payload(self, o: Outcome) -> dict[str, Any]:
        return {"message": assistant_message(o.reply, o.tool_ids)}

    def logprobs(self, ctx: EngineContext, o: Outcome) -> dict[str, Any]:
        return chat_logprobs(ctx.token_strings(o.sampled.ids), o.sampled.logprobs.tolist())

    def record_response(self, p: Prepared, o: Outcome) -> dict[str, Any]:
        return {**self.payload(o), "finish_reason": self.reason(o), "parse_failures": o.reply.failures}

    def streamer(self, ctx: EngineContext, p: Prepared, call_id: str, weight_version: str) -> ChatStreamer:
        return ChatStreamer(self, ctx, p, call_id, weight_version)


class ChatStreamer(OpenAIStreamer):
    """`chat.completion.chunk` frames: a role, then content, reasoning and tool-call deltas."""

    kind = "chat.completion.chunk"

    def __init__(self, front: ChatFront, ctx: EngineContext, p: Prepared, call_id: str, weight_version: str):
        super().__init__(front, ctx, p, call_id, weight_version)
        self.calls = 0

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return self.chunk([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}])

    def opening(self) -> list[bytes]:
        return [self._delta({"role": "assistant", "content": ""})]

    def event(self, event: ReplyEvent, tool_id: str | None) -> list[bytes]:
        if event.kind == "tool_call":
            self.calls += 1
            return [self._delta({"tool_calls": [tool_call_dict(event.call, tool_id, index=self.calls - 1)]})]
        if event.kind in ("content", "reasoning"):
            return [self._delta({"content" if event.kind == "content" else "reasoning_content": event.text})]
        return []

    def last_choice(self, o: Outcome) -> dict[str, Any]:
        return {"index": 0, "delta": {}}
