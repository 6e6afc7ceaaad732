"""One model call on a token engine (embedded or SGLang), whatever wire it came in on.

resolve the target (the route) → plan the prompt on the agent's token tree (the wire's
front-end) → generate → record → respond (the front-end formats the answer or the stream).
Every wire runs this once; a front-end only parses its request and formats what the pipeline
hands it. A call is committed to the store before any of its answer that depends on the
reply's end is sent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive

from roost.rollout.chat.detokenize import IncrementalDecoder
from roost.rollout.chat.reply_parser import ParsedReply, ReplyEvent, ReplyParser, collect
from roost.rollout.engine_api.sglang_client import EngineError, EngineUnavailable, Generation
from roost.rollout.gateway.core.admission import Admission
from roost.rollout.gateway.core.backend import Counting, Front
from roost.rollout.gateway.core.engine_context import EngineContext
from roost.rollout.gateway.core.errors import BackendUnavailable, engine_failure
from roost.rollout.gateway.core.image_parts import ImageInput, recorded_request
from roost.rollout.gateway.core.pause import PauseGate
from roost.rollout.gateway.core.prompt_builder import PromptPlan
from roost.rollout.gateway.core.recording import (
    CallTarget,
    Sampled,
    call_record,
    new_id,
    node_for,
    reply_key,
    timings,
)
from roost.rollout.gateway.core.router import EngineSlot
from roost.rollout.gateway.core.stop_strings import StopTrimmer, trim_stop
from roost.rollout.gateway.core.template_messages import ArgumentDefaults
from roost.tracing import TraceIds

log = logging.getLogger("roost.gateway")
ENGINE_PROBE_S = 5.0  # an engine slower than this to answer /health counts as unreachable


@dataclass
class Prepared:
    """A call ready for the engine: where it goes, its prompt, and how its reply is read."""

    req: Any  # the wire's parsed request, for its front-end's formatting
    target: CallTarget
    model: str
    plan: PromptPlan
    params: dict[str, Any]
    n: int
    stream: bool
    stops: list[str]
    raw_body: bytes
    received: float
    chain_end: bytes | None = None
    """The rendered messages' chain key (replies get keys later calls continue); None: a raw prompt."""
    parse_reply: bool = True
    """Split the reply into reasoning, content and tool calls; False: all of it is content."""
    parse_tools: bool = False
    skip_special_tokens: bool = True
    constraint: dict[str, str] | None = None
    """What held the reply to a grammar (structured_outputs.Constraint.record), for the stored call."""
    trace: TraceIds = TraceIds()
    """The call's `gateway.call` span (tracing on), stored with the call."""
    argument_defaults: ArgumentDefaults = field(default_factory=dict)
    """The tools' argument defaults, which the reply's key leaves out as the prompt's keys do."""
    notes: list[str] = field(default_factory=list)
    """What the request carried that was accepted without being acted on (request_notes.py)."""
    lora: str | None = None
    """The LoRA adapter the call's `model` names (None: the base model)."""
    engine: str = ""
    """The URL of the engine that sampled the reply (the router's choice), stored with the call."""
    held_s: float = 0.0
    """How long program-aware admission held the call before it ran (0: it went at once)."""
    paused_s: float = 0.0
    """How long the call waited at the pause gate (a weight update's pause; 0: not paused)."""
    images: list[ImageInput] = field(default_factory=list)
    """The prompt's images in order (`plan.images` says where their placeholder ids are)."""

    @property
    def image_data(self) -> list[str] | None:
        """The images as the engine is sent them (SGLang's `image_data`); None: a text call."""
        return [image.data_url for image in self.images] or None


@dataclass
class Outcome:
    """One finished choice, recorded."""

    call_id: str
    sampled: Sampled
    reply: ParsedReply
    tool_ids: list[str]


def recorded_response(front: Front, p: Prepared, outcome: Outcome) -> dict[str, Any]:
    """The reply as stored, with the constraint that held it (its grammar is in the stored
    sampling params) and the notes on what the request carried that was not acted on."""
    response = front.record_response(p, outcome)
    if p.constraint is not None:
        response = {**response, "constraint": p.constraint}
    return response if not p.notes else {**response, "notes": p.notes}


class PlainText:
    """The reply parser of a raw prompt: everything is content."""

    def feed(self, text: str) -> list[ReplyEvent]:
        return [ReplyEvent("content", text)] if text else []

    def finish(self) -> list[ReplyEvent]:
        return []


class TokenBackend:
    """The token engine as a `Backend`: every call planned, generated and recorded token by token."""

    def __init__(self, ctx: EngineContext, gate: PauseGate, admission: Admission | None = None):
        self.ctx = ctx
        self.gate = gate
        self.admission = admission
        self.router = ctx.router
        self.served_model = ctx.served_model

    async def call(
        self, front: Front, target: CallTarget, req: Any, raw_body: bytes, received: float, receive: Receive
    ) -> Response:
        """Admit the call past the pause gate; it counts as in flight until its answer is out
        (for a stream: until the stream ends). With program-aware admission a session's first call
        waits its turn first (not in flight meanwhile: a pause does not wait for it)."""
        held_s = await self._admit(target)
        at_gate = time.perf_counter()
        await self.gate.enter()
        paused_s = time.perf_counter() - at_gate
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.gate.exit()

        handed_over = False
        tracing = self.ctx.tracing
        try:
            with tracing.span("gateway.plan"):
                await self.ctx.learn_adapter(getattr(req, "model", None))
                p = await front.prepare(self.ctx, target, req, raw_body, received)
            p.lora = self.ctx.adapter_of(p.model)
            p.held_s, p.paused_s = held_s, paused_s
            p.trace = tracing.current()
            self.ctx.notes.warn(p.notes)
            if p.stream:
                response = await self._stream(front, p, release)
                handed_over = True
                return response
            return await self._complete(front, p, receive)
        finally:
            if not handed_over:
                release()

    async def _admit(self, target: CallTarget) -> float:
        """Wait for the session's admission; return the seconds it was held (0: it went at once).
        Only a call that waits gets a `gateway.admission` span."""
        if self.admission is None:
            return 0.0
        session_id = target.session.session_id
        outcome = await self.admission.admit_now(session_id)
        held_s = 0.0
        if outcome is None:
            if self.admission.is_paused(session_id):
                self.ctx.metrics.admissions.labels("paused").inc()
            waited = time.perf_counter()
            with self.ctx.tracing.span("gateway.admission", {"roost.session_id": session_id}) as span:
                outcome = await self.admission.wait_turn(session_id)
                if span is not None:
                    span.set_attribute("roost.admission", outcome)
            held_s = time.perf_counter() - waited
        if outcome != "running":
            self.ctx.metrics.admissions.labels(outcome).inc()
        return held_s

    async def count_tokens(self, front: Counting, target: CallTarget, req: Any, raw_body: bytes) -> int:
        await self.ctx.learn_adapter(getattr(req, "model", None))
        return await front.count(self.ctx, target, req, raw_body)

    async def model_cards(self) -> list[dict[str, Any]]:
        """The base model, then the LoRA adapters the engine has loaded (vLLM's list: `parent` names the base)."""
        await self.ctx.ask_adapters()
        card = {"object": "model", "created": 0, "owned_by": "roost", "max_model_len": self.ctx.context_length}
        base = {"id": self.served_model, **card}
        return [base, *({"id": name, **card, "parent": self.served_model} for name in sorted(self.ctx.adapters))]

    async def models(self) -> Response:
        body = {"object": "list", "data": await self.model_cards()}
        return Response(orjson.dumps(body), media_type="application/json")

    async def engine_health(self) -> str:
        """`ok` while an engine that may take calls (up, or down and answering again) answers /health."""
        up = [e.client.health() for e in self.router.engines if e.state != "stale"]
        try:
            answers = await asyncio.wait_for(asyncio.gather(*up), ENGINE_PROBE_S)
        except TimeoutError:
            answers = []
        return "ok" if any(answers) else "unreachable"

    async def session_finished(self, session_id: str) -> None:
        """The session is over: the engine it is pinned to may drop what it kept for it (best
        effort: an engine that does not answer in time keeps it until it must evict it); its
        admission place goes to the next session waiting."""
        if self.admission is not None:
            await self.admission.finish(session_id)
        engine = self.router.release(session_id)
        if engine is None:
            return
        try:
            await asyncio.wait_for(engine.client.close_session(session_id), ENGINE_PROBE_S)
        except (EngineError, TimeoutError) as exc:
            log.info("engine %s did not close session %s: %s", engine.engine_id, session_id, exc)

    async def close(self) -> None:
        await self.router.close()
        self.ctx.preparers.shutdown(wait=False, cancel_futures=True)

    def _parser(self, p: Prepared) -> ReplyParser | PlainText:
        if not p.parse_reply:
            return PlainText()
        return ReplyParser(self.ctx.reply_format, parse_tools=p.parse_tools)

    async def _record(
        self,
        front: Front,
        p: Prepared,
        call_id: str,
        sampled: Sampled,
        events: list[ReplyEvent],
        tool_ids: list[str],
        started: float,
        engine_done: float,
    ) -> Outcome:
        """Store the call (committed on return) and add it to the agent's tree."""
        ctx = self.ctx
        outcome = Outcome(call_id, sampled, collect(events), tool_ids)
        reply = outcome.reply
        if reply.failures:
            ctx.metrics.tool_parse_failures.inc(len(reply.failures))
        key = None if p.chain_end is None else reply_key(p.chain_end, reply, p.argument_defaults)
        record = call_record(
            call_id=call_id,
            target=p.target,
            endpoint=front.endpoint,
            backend=ctx.config.backend,
            model=p.model,
            plan=p.plan,
            sampled=sampled,
            sampling_params=p.params,
            request=recorded_request(p.raw_body, p.images),
            response=recorded_response(front, p, outcome),
            timings=timings(
                p.received,
                started,
                engine_done,
                time.perf_counter(),
                held_s=p.held_s,
                paused_s=p.paused_s,
                prefill_s=sampled.prefill_s,
            ),
            reply_key=key,
            trace=p.trace,
            adapter=p.lora or "",
            engine=p.engine,
        )
        # A stream records after its call span ended: its record span is still that span's child.
        with ctx.tracing.span("gateway.record", {"roost.call_id": call_id}, parent=p.trace.traceparent):
            await ctx.record(record, [image.record for image in p.images])
        p.target.session.tree(p.target.agent).add(node_for(call_id, p.plan, sampled, ctx.tokenizer, key))
        ctx.count_call(front.endpoint, p.plan, sampled)
        if self.admission is not None:
            self.admission.note(p.target.session.session_id, len(p.plan.prompt_ids) + len(sampled.ids))
        return outcome

    async def _complete(self, front: Front, p: Prepared, receive: Receive) -> Response:
        ctx = self.ctx
        call_ids = [new_id() for _ in range(p.n)]
        started = time.perf_counter()
        try:
            with ctx.tracing.span("gateway.engine", {"roost.prompt_tokens": len(p.plan.prompt_ids), "roost.n": p.n}):
                generations = await self._generate(front.endpoint, p, call_ids, receive)
        except EngineError as exc:
            ctx.forget_adapter(p.lora, exc)
            raise engine_failure(exc, ctx.metrics, ctx.config.retry_after_s) from exc
        engine_done = time.perf_counter()
        if any(gen.finish_reason.get("type") == "abort" for gen in generations):
            raise BackendUnavailable(
                "the engine aborted the generation (paused or restarting?); retry",
                retry_after_s=ctx.config.retry_after_s,
                code="engine_aborted",
            )
        recorded = []
        for cid, gen in zip(call_ids, generations):
            sampled = ctx.sampled_from(gen)
            text = ctx.tokenizer.decode(sampled.ids, skip_special_tokens=p.skip_special_tokens)
            parser = self._parser(p)
            events = parser.feed(trim_stop(text, sampled.finish_reason)) + parser.finish()
            tool_ids = [front.tool_id() for e in events if e.kind == "tool_call"]
            recorded.append(self._record(front, p, cid, sampled, events, tool_ids, started, engine_done))
        outcomes = [await recorded[0]] if len(recorded) == 1 else list(await asyncio.gather(*recorded))
        body = front.answer(ctx, p, outcomes)
        ctx.observe(front.endpoint, p.received, engine_done - started)
        return Response(
            orjson.dumps(body),
            media_type="application/json",
            headers=ctx.call_headers(p.target, call_ids, engine_done - started),
        )

    async def _generate(self, endpoint: str, p: Prepared, call_ids: list[str], receive: Receive) -> list[Generation]:
        """Generate on the session's engine; when it fails before answering (no token reached the
        client yet), the call is tried once more on another engine, so it is recorded once."""
        prompt = p.plan.prompt_ids.tolist()
        first = self.router.pick(p.target.session.session_id)
        try:
            return await self._generate_on(first, endpoint, p, prompt, call_ids, receive)
        except EngineUnavailable as exc:
            second = self._failover(p, first, exc)
        try:
            return await self._generate_on(second, endpoint, p, prompt, call_ids, receive)
        except EngineUnavailable as exc:
            self._failed(second, exc)
            raise

    async def _generate_on(
        self, engine: EngineSlot, endpoint: str, p: Prepared, prompt: list[int], call_ids: list[str], receive: Receive
    ) -> list[Generation]:
        p.engine = engine.url
        session = p.target.session.session_id
        return await self.ctx.generate(
            engine, endpoint, prompt, p.params, call_ids, receive, p.lora, session, p.image_data
        )

    def _failed(self, engine: EngineSlot, exc: EngineUnavailable) -> None:
        """An engine that did not answer at all (refused, timed out) leaves rotation until a probe
        finds it again; one that answered a 5xx stays in."""
        if exc.status is None:
            self.router.mark_down(engine, str(exc))

    def _failover(self, p: Prepared, failed: EngineSlot, exc: EngineUnavailable) -> EngineSlot:
        """The engine to retry on (the session is pinned to it); `exc` again when there is none."""
        self._failed(failed, exc)
        try:
            other = self.router.pick(p.target.session.session_id, exclude=(failed.engine_id,))
        except BackendUnavailable:
            raise exc from None
        self.ctx.metrics.engine_errors.labels("engine_failover").inc()
        log.warning("engine %s failed a call (%s); retrying it on %s", failed.engine_id, exc, other.engine_id)
        return other

    async def _stream(self, front: Front, p: Prepared, release: Callable[[], None]) -> Response:
        """Open the engine stream before answering, so an engine failure is a plain 503 (or, before
        the first token, a retry on another engine)."""
        ctx = self.ctx
        call_id = new_id()
        started = time.perf_counter()
        try:
            with ctx.tracing.span(
                "gateway.engine", {"roost.prompt_tokens": len(p.plan.prompt_ids), "roost.stream": True}
            ):
                engine, engine_stream, first = await self._open_stream(p, call_id)
        except EngineError as exc:
            ctx.forget_adapter(p.lora, exc)
            raise engine_failure(exc, ctx.metrics, ctx.config.retry_after_s) from exc
        prefill_s = time.perf_counter() - started  # the first chunk carries the first token
        frames = self._frames(front, p, call_id, first, engine_stream, started, prefill_s, release, engine)
        return StreamingResponse(frames, media_type="text/event-stream", headers=ctx.call_headers(p.target, [call_id]))

    async def _open_stream(self, p: Prepared, call_id: str) -> tuple[EngineSlot, AsyncIterator, Any]:
        """The engine stream and its first chunk, from the session's engine or, when that fails
        first, once from another; the engine counts the stream in flight until `_frames` ends it."""
        first = self.router.pick(p.target.session.session_id)
        try:
            return await self._stream_on(first, p, call_id)
        except EngineUnavailable as exc:
            second = self._failover(p, first, exc)
        try:
            return await self._stream_on(second, p, call_id)
        except EngineUnavailable as exc:
            self._failed(second, exc)
            raise

    async def _stream_on(self, engine: EngineSlot, p: Prepared, call_id: str) -> tuple[EngineSlot, AsyncIterator, Any]:
        p.engine = engine.url
        stream = engine.client.generate_stream(
            p.plan.prompt_ids.tolist(),
            p.params,
            rid=call_id,
            lora=p.lora,
            session=p.target.session.session_id,
            image_data=p.image_data,
        )
        self.router.begin(engine)
        try:
            return engine, stream, await anext(stream)
        except StopAsyncIteration:
            self.router.end(engine)
            await stream.aclose()
            raise BackendUnavailable(
                "the engine closed the stream without a token; retry",
                retry_after_s=self.ctx.config.retry_after_s,
                code="engine_protocol_error",
            ) from None
        except BaseException:
            self.router.end(engine)
            await stream.aclose()
            raise

    async def _frames(
        self,
        front: Front,
        p: Prepared,
        call_id: str,
        first: Any,
        engine_stream: AsyncIterator,
        started: float,
        prefill_s: float,
        release: Callable[[], None],
        engine: EngineSlot,
    ) -> AsyncIterator[bytes]:
        ctx = self.ctx
        out = front.streamer(ctx, p, call_id, first.weight_version)
        sampled = Sampled(prefill_s=prefill_s)
        decoder = IncrementalDecoder(ctx.tokenizer, skip_special_tokens=p.skip_special_tokens)
        trimmer = StopTrimmer(p.stops)
        parser = self._parser(p)
        events: list[ReplyEvent] = []
        tool_ids: list[str] = []
        try:
            for frame in out.opening():
                yield frame
            delta = first
            while True:
                sampled.ids.extend(delta.output_ids)
                sampled.logprobs.extend(delta.output_logprobs)
                sampled.weight_version = delta.weight_version
                text = trimmer.feed(decoder.push(delta.output_ids))
                if delta.finish_reason is not None:
                    sampled.finish_reason = delta.finish_reason
                    text += trimmer.feed(decoder.flush()) + trimmer.finish(delta.finish_reason)
                new = parser.feed(text) if text else []
                if delta.finish_reason is not None:
                    new += parser.finish()
                events.extend(new)
                for event in new:
                    tool_id = front.tool_id() if event.kind == "tool_call" else None
                    if tool_id is not None:
                        tool_ids.append(tool_id)
                    for frame in out.event(event, tool_id):
                        yield frame
                if delta.finish_reason is not None:
                    break
                try:
                    delta = await anext(engine_stream)
                except StopAsyncIteration:
                    raise BackendUnavailable(
                        "the engine stream ended before a finish reason", code="engine_protocol_error"
                    ) from None
            engine_done = time.perf_counter()
            if sampled.finish_reason.get("type") == "abort":
                raise BackendUnavailable(
                    "the engine aborted the generation (paused or restarting?); retry", code="engine_aborted"
                )
            outcome = await self._record(front, p, call_id, sampled, events, tool_ids, started, engine_done)
            for frame in out.closing(outcome):
                yield frame
            ctx.observe(front.endpoint, p.received, engine_done - started)
        except EngineError as exc:
            # Headers are out: the failure can only be reported inside the stream. The call
            # is not recorded, as no complete reply was returned.
            if isinstance(exc, EngineUnavailable):
                self._failed(engine, exc)
            yield out.failure(engine_failure(exc, ctx.metrics, ctx.config.retry_after_s))
        except BackendUnavailable as error:
            ctx.metrics.engine_errors.labels(error.code).inc()
            yield out.failure(error)
        except (asyncio.CancelledError, GeneratorExit):
            ctx.metrics.calls_aborted.labels(front.endpoint).inc()  # the client left mid-stream: nothing recorded
            raise
        finally:
            release()
            self.router.end(engine)
            await engine_stream.aclose()
