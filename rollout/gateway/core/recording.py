"""Turning one finished generation into a stored call, a token-tree node and a reply."""

from __future__ import annotations

import time
import uuid
from array import array
from dataclasses import dataclass, field
from typing import Any

from roost.rollout.chat.reply_parser import ParsedReply, ReplyEvent, collect
from roost.rollout.chat.tokenizer import ChatTokenizer
from roost.rollout.gateway.core.prompt_builder import PromptPlan
from roost.rollout.gateway.core.sessions import SessionState
from roost.rollout.gateway.core.template_messages import ArgumentDefaults, extend_chain, reply_message_key
from roost.rollout.gateway.core.token_tree import Node
from roost.rollout.gateway.openai.bodies import assistant_message
from roost.rollout.store.records import CallRecord
from roost.tracing import TraceIds


def new_id() -> str:
    return uuid.uuid4().hex


@dataclass
class CallTarget:
    """Where a call goes: a session, one of its agents, and that agent's parent agent."""

    session: SessionState
    agent: str
    parent_agent: str | None


@dataclass
class Sampled:
    """What the engine produced for one call, streamed or not."""

    ids: array = field(default_factory=lambda: array("i"))
    logprobs: array = field(default_factory=lambda: array("d"))
    finish_reason: dict[str, Any] = field(default_factory=dict)
    weight_version: str = "default"
    prefill_s: float | None = None
    """The time to the first token (streamed: the first chunk's arrival; else the engine's
    `prefill_latency`); None when the engine does not say, as SGLang's answers do not."""
    routing: bytes = b""
    """The routed experts of every token run through the model, prompt from its first and
    sampled but the last (`roost.rollout.store.routing_blob`); b"": none asked or answered."""


def node_for(
    call_id: str, plan: PromptPlan, sampled: Sampled, tokenizer: ChatTokenizer, reply_key: bytes | None
) -> Node:
    path = array("i", plan.prompt_ids)
    path.extend(sampled.ids)
    return Node(
        call_id=call_id,
        path=path,
        prompt_len=len(plan.prompt_ids),
        ends_with_eos=bool(sampled.ids) and sampled.ids[-1] == tokenizer.eos_id,
        reply_text=tokenizer.decode(sampled.ids),
        prompt_key=plan.prompt_key,
        reply_key=reply_key,
        render_len=plan.render_len,
        render_digest=plan.render_digest,
        turns_before=plan.turns_before,
        images=plan.images,
    )


def node_from_call(call: CallRecord, tokenizer: ChatTokenizer) -> Node:
    """Rebuild a tree node from a stored call (after a restart)."""
    path = array("i", call.prompt_ids)
    path.extend(call.sampled_ids)
    return Node(
        call_id=call.call_id,
        path=path,
        prompt_len=len(call.prompt_ids),
        ends_with_eos=len(call.sampled_ids) > 0 and call.sampled_ids[-1] == tokenizer.eos_id,
        reply_text=tokenizer.decode(call.sampled_ids),
        prompt_key=bytes.fromhex(call.prompt_key) if call.prompt_key else None,
        reply_key=bytes.fromhex(call.reply_key) if call.reply_key else None,
        render_len=call.render_len,
        render_digest=bytes.fromhex(call.render_digest) if call.render_digest else b"",
        turns_before=call.turns_before,
        images=tuple(call.images),
    )


def call_record(
    *,
    call_id: str,
    target: CallTarget,
    endpoint: str,
    backend: str,
    model: str,
    plan: PromptPlan,
    sampled: Sampled,
    sampling_params: dict[str, Any],
    request: Any,
    response: dict[str, Any],
    timings: dict[str, float],
    reply_key: bytes | None,
    trace: TraceIds = TraceIds(),
    adapter: str = "",
    engine: str = "",
) -> CallRecord:
    return CallRecord(
        call_id=call_id,
        session_id=target.session.session_id,
        agent_id=target.agent,
        parent_agent=target.parent_agent,
        seq=target.session.take_seq(),
        endpoint=endpoint,
        backend=backend,
        model=model,
        parent_call_id=plan.parent.call_id if plan.parent is not None else None,
        shared_prefix_len=plan.shared_prefix_len,
        kind=plan.kind,
        reuse=plan.reuse,
        prompt_ids=plan.prompt_ids,
        sampled_ids=sampled.ids,
        sampled_logprobs=sampled.logprobs,
        routed_experts=sampled.routing,
        finish_reason=sampled.finish_reason,
        sampling_params=sampling_params,
        weight_version=sampled.weight_version,
        timings=timings,
        request=request,
        response=response,
        created_at=time.time(),
        prompt_key=plan.prompt_key.hex() if plan.prompt_key else "",
        reply_key=reply_key.hex() if reply_key else "",
        adapter=adapter,
        engine=engine,
        render_len=plan.render_len,
        render_digest=plan.render_digest.hex(),
        turns_before=plan.turns_before,
        trace_id=trace.trace_id,
        span_id=trace.span_id,
        images=list(plan.images),
    )


def timings(
    received: float,
    started_engine: float,
    engine_done: float,
    recorded: float,
    *,
    held_s: float = 0.0,
    paused_s: float = 0.0,
    prefill_s: float | None = None,
) -> dict[str, float]:
    """A call's stored timings (perf_counter seconds in, milliseconds out). `prepare_ms` includes
    `held_ms` (admission's wait) and `paused_ms` (the pause gate's); `engine_ms` splits into
    `prefill_ms` and `decode_ms` only where the time to the first token is known: an estimate
    would read as a measurement."""
    out = {
        "prepare_ms": (started_engine - received) * 1e3,
        "held_ms": held_s * 1e3,
        "paused_ms": paused_s * 1e3,
        "engine_ms": (engine_done - started_engine) * 1e3,
        "record_ms": (recorded - engine_done) * 1e3,
        "total_ms": (recorded - received) * 1e3,
    }
    if prefill_s is not None:
        out["prefill_ms"] = prefill_s * 1e3
        out["decode_ms"] = out["engine_ms"] - out["prefill_ms"]
    return out


def reply_key(chain_end: bytes, reply: ParsedReply, defaults: ArgumentDefaults | None = None) -> bytes:
    """The key a continuation of this reply will carry: its content and tool calls (arguments
    equal to the tools' defaults left out, as the prompt's keys leave them) after `chain_end`."""
    calls = [(c.name, c.arguments) for c in reply.tool_calls]
    return extend_chain(chain_end, reply_message_key(reply.content, calls, defaults))


def build_reply(
    events: list[ReplyEvent], tool_ids: list[str], chain_end: bytes
) -> tuple[ParsedReply, dict[str, Any], bytes]:
    """The reply as returned to the harness, and the key a continuation of it will carry."""
    reply = collect(events)
    return reply, assistant_message(reply, tool_ids), reply_key(chain_end, reply)
