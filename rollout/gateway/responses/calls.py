"""`/v1/responses`: the OpenAI Responses front-end on the call pipeline (core/call_pipeline.py).

The input items (after those of the `previous_response_id` chain, read back from the store)
become the chat messages the template renders (responses/items.py) and are planned on the
agent's token tree as chat calls are; the parsed reply is answered as reasoning, message and
function_call output items, or as the Responses stream events.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson

from roost.rollout.chat.reply_parser import ParsedToolCall, ReplyEvent
from roost.rollout.gateway.anthropic.messages import ThinkingSigner
from roost.rollout.gateway.core.call_pipeline import Outcome, Prepared
from roost.rollout.gateway.core.engine_context import EngineContext
from roost.rollout.gateway.core.errors import GatewayError, InvalidRequest
from roost.rollout.gateway.core.image_parts import ImageParts
from roost.rollout.gateway.core.recording import CallTarget
from roost.rollout.gateway.core.request_notes import unknown_fields
from roost.rollout.gateway.core.sampling_params import max_new_tokens, prompt_limit, prompt_too_long
from roost.rollout.gateway.core.structured_outputs import (
    constrained,
    from_text_format,
    only_one,
    tool_choice_constraint,
)
from roost.rollout.gateway.core.template_messages import TemplateCall, argument_defaults
from roost.rollout.gateway.openai.chat_calls import plan_call, prompt_tail, tool_call_id
from roost.rollout.gateway.responses.items import (
    input_items,
    item_notes,
    offered_functions,
    stored_items,
    to_template,
    tool_dicts,
    tool_notes,
)
from roost.rollout.gateway.responses.wire import InputItem, ResponsesRequest, ToolChoiceFunction
from roost.rollout.store.reader import TrajectoryReader

ENDPOINT = "responses"


@dataclass
class ResponsesCall:
    """The request with what its answer repeats: when it was made and its items so far."""

    req: ResponsesRequest
    created_at: int
    items: list[dict[str, Any]]
    """The chain's items then this request's input, as stored with the call (for the next link)."""


def response_id(call_id: str) -> str:
    return f"resp_{call_id}"


def stored_response(reader: TrajectoryReader, rid: str, session_id: str) -> dict[str, Any] | None:
    """The stored answer of response `rid` if it is a stored response of this session."""
    record = reader.call(rid.removeprefix("resp_")) if rid.startswith("resp_") else None
    if record is None or record.session_id != session_id or record.endpoint != ENDPOINT:
        return None
    if not record.response.get("store", True):
        return None
    return record.response


async def chain_items(ctx: EngineContext, target: CallTarget, rid: str | None) -> list[dict[str, Any]]:
    """The items of the chain ending at `rid` (its inputs and outputs, oldest first)."""
    if rid is None:
        return []
    stored = await ctx.store.read(lambda r: stored_response(r, rid, target.session.session_id))
    if stored is None:
        raise InvalidRequest(
            f"previous_response_id {rid!r} is no stored response of this session; send one this session's "
            "/responses answered with store=true, or send the whole conversation as input",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    return stored.get("conversation", []) + stored["output"]


def _sampling(req: ResponsesRequest, max_tokens: int) -> dict[str, Any]:
    params: dict[str, Any] = {"max_new_tokens": max_tokens}
    for name in ("temperature", "top_p", "custom_params"):
        value = getattr(req, name)
        if value is not None:
            params[name] = value
    return params


def template_call(
    req: ResponsesRequest, items: list[InputItem], from_chain: int, images: ImageParts, signer: ThinkingSigner
) -> TemplateCall:
    """A Responses request in the template's terms: `items`, the first `from_chain` of them from
    its previous responses, after its instructions, its images collected in `images`. Responses
    has no template arguments."""
    messages = to_template(items, from_chain, req.instructions, images, signer)
    return TemplateCall(messages, tool_dicts(req.tools), images=images.images)


class ResponsesFront:
    """OpenAI Responses: items in; reasoning, message and function_call items out."""

    endpoint = ENDPOINT
    passthrough_path = None  # the OpenAI pass-through forwards chat and text completions only

    def __init__(self, signer: ThinkingSigner):
        self.signer = signer

    async def prepare(
        self, ctx: EngineContext, target: CallTarget, req: ResponsesRequest, raw_body: bytes, received: float
    ) -> Prepared:
        ctx.check_model(req.model)
        history = await chain_items(ctx, target, req.previous_response_id)
        items: list[InputItem] = stored_items(history, "previous_response_id") + input_items(req)
        template = template_call(req, items, len(history), ctx.image_parts(), self.signer)
        tools = template.tools
        plan, chain_end = await plan_call(
            ctx,
            target,
            template,
            prompt_limit(req, ctx.context_length),
            len(raw_body),
            lambda at_least: prompt_too_long(req, at_least, ctx.context_length, "input"),
        )
        limit = max_new_tokens(req, len(plan.prompt_ids), ctx.context_length, ctx.config.default_max_tokens)
        conversation = history + [i.model_dump(exclude_none=True) for i in input_items(req)]
        call = ResponsesCall(req, int(time.time()), conversation)
        choice = req.tool_choice.name if isinstance(req.tool_choice, ToolChoiceFunction) else req.tool_choice
        constraint = only_one(
            from_text_format(req.text),
            tool_choice_constraint(
                tools, choice, ctx.reply_format, prompt_tail(ctx, plan), req.parallel_tool_calls is not False
            ),
        )
        return Prepared(
            call,
            target,
            req.model,
            plan,
            constrained(_sampling(req, limit), constraint),
            1,
            req.stream,
            [],
            raw_body,
            received,
            chain_end=chain_end,
            parse_tools=tools is not None and req.tool_choice != "none",
            constraint=constraint.record() if constraint else None,
            argument_defaults=argument_defaults(tools),
            notes=self._notes(req, items, len(history)),
            images=template.images,
        )

    @staticmethod
    def _notes(req: ResponsesRequest, items: list[InputItem], from_chain: int) -> list[str]:
        """What the request carried that is not rendered: unknown fields, tools, item types."""
        return unknown_fields(req, "responses") + tool_notes(req.tools) + item_notes(items, from_chain)

    def tool_id(self) -> str:
        return tool_call_id()

    def key_messages(self, req: ResponsesRequest) -> tuple[list | None, list | None]:
        return None, None  # never forwarded (passthrough_path is None)

    def output(self, o: Outcome) -> list[dict[str, Any]]:
        reply = o.reply
        items: list[dict[str, Any]] = []
        if reply.reasoning:
            items.append(reasoning_item(o.call_id, reply.reasoning, self.signer.sign(reply.reasoning)))
        if reply.content or not reply.tool_calls:
            items.append(message_item(o.call_id, reply.content or ""))
        for call, tool_id in zip(reply.tool_calls, o.tool_ids):
            items.append(function_call_item(call, tool_id))
        return items

    def response(self, p: Prepared, call_id: str, o: Outcome | None, output: list[dict[str, Any]]) -> dict[str, Any]:
        """The Response object: in progress (`o` None) or finished."""
        call: ResponsesCall = p.req
        req = call.req
        status, incomplete = "in_progress", None
        if o is not None:
            status = "incomplete" if o.sampled.finish_reason.get("type") == "length" else "completed"
            incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        tool_choice = req.tool_choice or "auto"
        return {
            "id": response_id(call_id),
            "object": "response",
            "created_at": call.created_at,
            "status": status,
            "error": None,
            "incomplete_details": incomplete,
            "instructions": req.instructions,
            "model": p.model,
            "output": output,
            "parallel_tool_calls": req.parallel_tool_calls is not False,
            "previous_response_id": req.previous_response_id,
            "store": req.store,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "max_output_tokens": req.max_output_tokens,
            "tool_choice": tool_choice if isinstance(tool_choice, str) else tool_choice.model_dump(),
            # The function tools the model was offered; a hosted or unknown tool type, left out of the prompt
            # (and noted), is not echoed as if it had been.
            "tools": [t.model_dump(exclude_none=True) for t in offered_functions(req.tools or [])],
            "metadata": req.metadata or {},
            "text": req.text or {"format": {"type": "text"}},
            "truncation": req.truncation or "disabled",
            "usage": usage(p, len(o.sampled.ids)) if o else None,
        }

    def record_response(self, p: Prepared, o: Outcome) -> dict[str, Any]:
        # The conversation so far is kept with the answer, so `previous_response_id` needs one read.
        return {
            **self.response(p, o.call_id, o, self.output(o)),
            "conversation": p.req.items,
            "parse_failures": o.reply.failures,
        }

    def answer(self, ctx: EngineContext, p: Prepared, outcomes: list[Outcome]) -> dict[str, Any]:
        o = outcomes[0]
        return self.response(p, o.call_id, o, self.output(o))

    def streamer(self, ctx: EngineContext, p: Prepared, call_id: str, weight_version: str) -> ResponsesStreamer:
        return ResponsesStreamer(self, p, call_id)


def public(stored: dict[str, Any]) -> dict[str, Any]:
    """A stored answer as `GET /v1/responses/{id}` returns it."""
    return {k: v for k, v in stored.items() if k not in ("conversation", "parse_failures")}


def usage(p: Prepared, output_tokens: int) -> dict[str, Any]:
    prompt = len(p.plan.prompt_ids)
    cached = {"cached_tokens": p.plan.shared_prefix_len, "cache_write_tokens": 0}
    return {
        "input_tokens": prompt,
        "input_tokens_details": cached,
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + output_tokens,
    }


def reasoning_item(call_id: str, text: str, signature: str) -> dict[str, Any]:
    return {
        "id": f"rs_{call_id}",
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
        "encrypted_content": signature,
        "status": "completed",
    }


def message_item(call_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []
    return {"id": f"msg_{call_id}", "type": "message", "role": "assistant", "status": status, "content": content}


def function_call_item(call: ParsedToolCall, tool_id: str, status: str = "completed") -> dict[str, Any]:
    return {
        "id": f"fc_{tool_id.removeprefix('call_')}",
        "type": "function_call",
        "call_id": tool_id,
        "name": call.name,
        "arguments": call.arguments if status == "completed" else "",
        "status": status,
    }


class ResponsesStreamer:
    """The Responses event sequence: `response.created`, `response.in_progress`, per output
    item `response.output_item.added`, its deltas (`response.reasoning_text.delta`,
    `response.content_part.added` + `response.output_text.delta`,
    `response.function_call_arguments.delta`) and `.done` events, then `response.completed`."""

    def __init__(self, front: ResponsesFront, p: Prepared, call_id: str):
        self.front, self.p, self.call_id = front, p, call_id
        self.seq = 0
        self.index = -1
        self.open: str | None = None  # the type of the item being streamed
        self.text: list[str] = []

    def _event(self, kind: str, payload: dict[str, Any]) -> bytes:
        data = orjson.dumps({"type": kind, **payload, "sequence_number": self.seq})
        self.seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"

    def _response(self, o: Outcome | None, output: list[dict[str, Any]]) -> dict[str, Any]:
        return self.front.response(self.p, self.call_id, o, output)

    def opening(self) -> list[bytes]:
        body = self._response(None, [])
        return [
            self._event("response.created", {"response": body}),
            self._event("response.in_progress", {"response": body}),
        ]

    def _add(self, kind: str, item: dict[str, Any]) -> list[bytes]:
        frames = self._close()
        self.index += 1
        self.open, self.text = kind, []
        return frames + [self._event("response.output_item.added", {"output_index": self.index, "item": item})]

    def _at(self) -> dict[str, Any]:
        item_id = f"rs_{self.call_id}" if self.open == "reasoning" else f"msg_{self.call_id}"
        return {"item_id": item_id, "output_index": self.index, "content_index": 0}

    def _close(self) -> list[bytes]:
        if self.open is None:
            return []
        text, at = "".join(self.text), self._at()
        if self.open == "reasoning":
            item = reasoning_item(self.call_id, text, self.front.signer.sign(text))
            frames = [self._event("response.reasoning_text.done", {**at, "text": text})]
        else:
            item = message_item(self.call_id, text)
            part = item["content"][0]
            frames = [
                self._event("response.output_text.done", {**at, "text": text, "logprobs": []}),
                self._event("response.content_part.done", {**at, "part": part}),
            ]
        self.open = None
        return frames + [self._event("response.output_item.done", {"output_index": self.index, "item": item})]

    def event(self, ev: ReplyEvent, tool_id: str | None) -> list[bytes]:
        if ev.kind == "tool_call":
            item = function_call_item(ev.call, tool_id)
            frames = self._add("function_call", function_call_item(ev.call, tool_id, "in_progress"))
            self.open = None
            at = {"item_id": item["id"], "output_index": self.index}
            return frames + [
                self._event("response.function_call_arguments.delta", {**at, "delta": ev.call.arguments}),
                self._event("response.function_call_arguments.done", {**at, "arguments": ev.call.arguments}),
                self._event("response.output_item.done", {"output_index": self.index, "item": item}),
            ]
        if ev.kind == "reasoning" and ev.text:
            frames = (
                []
                if self.open == "reasoning"
                else self._add(
                    "reasoning",
                    {
                        "id": f"rs_{self.call_id}",
                        "type": "reasoning",
                        "summary": [],
                        "content": [],
                        "status": "in_progress",
                    },
                )
            )
            self.text.append(ev.text)
            return frames + [self._event("response.reasoning_text.delta", {**self._at(), "delta": ev.text})]
        if ev.kind == "content" and ev.text:
            frames = []
            if self.open != "message":
                frames = self._add("message", message_item(self.call_id, "", "in_progress"))
                part = {"type": "output_text", "text": "", "annotations": []}
                frames.append(self._event("response.content_part.added", {**self._at(), "part": part}))
            self.text.append(ev.text)
            return frames + [
                self._event("response.output_text.delta", {**self._at(), "delta": ev.text, "logprobs": []})
            ]
        return []

    def closing(self, o: Outcome) -> list[bytes]:
        frames = self._close()
        body = self._response(o, self.front.output(o))
        kind = "response.completed" if body["status"] == "completed" else "response.incomplete"
        return frames + [self._event(kind, {"response": body})]

    def failure(self, error: GatewayError) -> bytes:
        return self._event("error", {"code": error.code, "message": error.message, "param": error.param})
