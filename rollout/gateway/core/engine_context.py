"""What the token-engine call handlers share: the engines (their router), the tokenizer and
template, the store, metrics, limits and the threads that prepare big calls. Built once per
gateway and passed explicitly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from starlette.types import Receive

from roost.rollout.chat.reply_parser import ReplyFormat
from roost.rollout.chat.tokenizer import ChatTokenizer
from roost.rollout.engine_api.sglang_client import EngineError, Generation
from roost.rollout.gateway.config import GatewayConfig
from roost.rollout.gateway.core.errors import ClientDisconnected, ModelNotFound, StoreUnavailable
from roost.rollout.gateway.core.image_parts import ImageParts, VisionModel
from roost.rollout.gateway.core.metrics import GatewayMetrics
from roost.rollout.gateway.core.prompt_builder import PromptBuilder, PromptPlan
from roost.rollout.gateway.core.recording import CallTarget, Sampled
from roost.rollout.gateway.core.request_notes import NoteLog
from roost.rollout.gateway.core.router import EngineSlot, Router
from roost.rollout.hangup import ClientGone, cancelled_on_hangup
from roost.rollout.store import routing_blob
from roost.rollout.store.records import CallRecord, ImageRecord, ids_array, logprob_array
from roost.rollout.store.trajectory_store import TrajectoryStore
from roost.rollout.store.writer import StoreClosed
from roost.tracing import Tracing

T = TypeVar("T")
# Requests smaller than this are prepared on the event loop: rendering and tokenizing them
# takes less than handing them to a thread would.
INLINE_BODY_BYTES = 64 * 1024
ABORT_TIMEOUT_S = 5.0


@dataclass
class EngineContext:
    config: GatewayConfig
    router: Router
    tokenizer: ChatTokenizer
    builder: PromptBuilder
    store: TrajectoryStore
    metrics: GatewayMetrics
    served_model: str
    context_length: int
    reply_format: ReplyFormat
    preparers: ThreadPoolExecutor
    tracing: Tracing
    notes: NoteLog = field(default_factory=NoteLog)
    adapters: frozenset[str] = frozenset()
    """The LoRA adapters the engine listed when last asked: a harness names one as its `model`."""
    vision: VisionModel | None = None
    """How the model reads images; None: it reads text only."""

    def image_parts(self) -> ImageParts:
        """A collector for one request's images (refusing them for a text model)."""
        return ImageParts(self.vision, self.served_model)

    async def off_loop(self, body_bytes: int, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` (rendering, tokenizing), on a prepare thread when the request is big, so
        that one big call does not hold up the others, /health included."""
        if body_bytes < INLINE_BODY_BYTES:
            return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(self.preparers, partial(fn, *args))

    def is_base(self, model: str) -> bool:
        return model == self.served_model or model.rsplit("/", 1)[-1] == self.served_model

    def check_model(self, model: str) -> None:
        if not self.is_base(model) and model not in self.adapters:
            adapters = f" and the LoRA adapters {sorted(self.adapters)}" if self.adapters else ""
            raise ModelNotFound(
                f"model {model!r} is not served here; this gateway serves {self.served_model!r}{adapters} "
                "(see GET /v1/models)",
                param="model",
            )

    async def learn_adapter(self, model: Any) -> None:
        """A `model` that is neither the base nor a known adapter may be one loaded since the engine
        was last asked: ask it again (only then, so calls to known names cost nothing more)."""
        if isinstance(model, str) and not self.is_base(model) and model not in self.adapters:
            await self.ask_adapters()

    async def ask_adapters(self) -> None:
        """The adapters the first engine in rotation lists (a weight sync loads them on every engine)."""
        up = [e for e in self.router.engines if e.state == "up"]
        try:
            if up:
                self.adapters = frozenset(await up[0].client.lora_adapters())
        except EngineError:
            pass  # the engine cannot say: the names stay as last listed, an unknown one a 404

    def forget_adapter(self, lora: str | None, exc: EngineError) -> None:
        """An adapter the engine no longer has (unloaded since): later calls naming it are 404s."""
        if lora is not None and exc.status == 404:
            self.adapters = self.adapters - {lora}

    def adapter_of(self, model: str) -> str | None:
        """The LoRA adapter a checked call's `model` names; None: the base model."""
        return None if self.is_base(model) else model

    async def generate(
        self,
        engine: EngineSlot,
        endpoint: str,
        prompt: list[int],
        params: dict[str, Any],
        call_ids: list[str],
        receive: Receive,
        lora: str | None = None,
        session: str | None = None,
        images: list[str] | None = None,
    ) -> list[Generation]:
        """One request to `engine` per choice, the call id as SGLang's rid (`images`: the prompt's
        images as data URLs, in order, SGLang's `image_data`); n=1 is awaited directly
        (a task per call would cost a loop iteration on the hot path). When the client
        disconnects first, the engine requests are closed and aborted and nothing is recorded."""
        try:
            async with cancelled_on_hangup(receive):
                client = engine.client
                with self.router.serving(engine):
                    images = images or None
                    routing = self.config.record_routing
                    if len(call_ids) == 1:
                        return [
                            await client.generate(
                                prompt,
                                params,
                                rid=call_ids[0],
                                lora=lora,
                                session=session,
                                image_data=images,
                                routed_experts=routing,
                            )
                        ]
                    calls = (
                        client.generate(
                            prompt, params, rid=c, lora=lora, session=session, image_data=images, routed_experts=routing
                        )
                        for c in call_ids
                    )
                    return list(await asyncio.gather(*calls))
        except ClientGone:
            self.metrics.calls_aborted.labels(endpoint).inc()
            await self._abort(engine, call_ids)
            raise ClientDisconnected("the client disconnected before the answer; the call was aborted") from None

    async def _abort(self, engine: EngineSlot, call_ids: list[str]) -> None:
        """Closing the connection stops the embedded engine at once; SGLang notices it only
        every few seconds, so it is told as well. An engine that cannot be told (no
        /abort_request, down, slow) has still seen the connection close."""
        aborts = asyncio.gather(*(engine.client.abort(rid) for rid in call_ids), return_exceptions=True)
        try:
            await asyncio.wait_for(aborts, ABORT_TIMEOUT_S)
        except TimeoutError:
            pass

    def sampled_from(self, gen: Generation) -> Sampled:
        prefill = gen.meta_info.get("prefill_latency")  # roost's engine only
        return Sampled(
            ids_array(gen.output_ids),
            logprob_array(gen.output_logprobs),
            gen.finish_reason,
            gen.weight_version,
            float(prefill) if isinstance(prefill, (int, float)) else None,
            routing_blob.pack(gen.routed_experts.ids) if gen.routed_experts is not None else b"",
        )

    def token_strings(self, ids: Any) -> list[str]:
        return [self.tokenizer.decode([t]) for t in ids]

    async def record(self, record: CallRecord, images: Sequence[ImageRecord] = ()) -> None:
        try:
            await self.store.record_call(record, images)
        except StoreClosed as exc:
            raise StoreUnavailable(f"the trajectory store is closed ({exc}); the gateway is shutting down") from exc
        except Exception as exc:  # sqlite3 errors: disk full, I/O error, locked
            raise StoreUnavailable(
                f"the call could not be recorded ({type(exc).__name__}: {exc}); it was not returned, retry; "
                f"check the store at {self.store.path}"
            ) from exc

    def count_call(self, endpoint: str, plan: PromptPlan, sampled: Sampled) -> None:
        m = self.metrics
        m.calls.labels(endpoint, plan.kind, plan.reuse).inc()
        m.prompt_tokens.inc(len(plan.prompt_ids))
        m.reused_tokens.inc(plan.shared_prefix_len)
        m.completion_tokens.inc(len(sampled.ids))

    def observe(self, endpoint: str, received: float, engine_s: float) -> None:
        total = time.perf_counter() - received
        self.metrics.latency.labels(endpoint).observe(total)
        self.metrics.engine_latency.labels(endpoint).observe(engine_s)
        self.metrics.overhead.labels(endpoint).observe(max(total - engine_s, 0.0))

    @staticmethod
    def call_headers(target: CallTarget, call_ids: list[str], engine_s: float | None = None) -> dict[str, str]:
        headers = {
            "X-Roost-Call-Id": ",".join(call_ids),
            "X-Roost-Session-Id": target.session.session_id,
            "X-Roost-Agent": target.agent,
        }
        if engine_s is not None:
            # Server-Timing lets a client split its latency into engine time and gateway time.
            headers["Server-Timing"] = f"engine;dur={engine_s * 1e3:.3f}"
        return headers
