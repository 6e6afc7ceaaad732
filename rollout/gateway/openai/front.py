"""What the OpenAI wires' front-ends share: the answer body (choices, usage, token ids) and
the stream's framing (chunks, the usage chunk, `[DONE]`). Chat and text completions differ
only in a choice's payload (`message`/`delta` or `text`), logprobs and finish reason."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Any

from roost.rollout.gateway.core.call_pipeline import Outcome, Prepared
from roost.rollout.gateway.core.engine_context import EngineContext
from roost.rollout.gateway.core.errors import GatewayError
from roost.rollout.gateway.core.recording import CallTarget
from roost.rollout.gateway.core.sampling_params import refuse_unsupported
from roost.rollout.gateway.openai.bodies import SSE_DONE, chunk, sse, usage


def wants_logprobs(req: Any) -> bool:
    """Chat asks with `logprobs: true`; text completions with a number, where 0 asks for the
    sampled tokens' logprobs alone (as OpenAI and vLLM read it)."""
    return req.logprobs is not None and req.logprobs is not False


class OpenAIFront(ABC):
    """Base of the chat and text front-ends; subclasses say what a choice holds."""

    endpoint: str
    passthrough_path: str | None
    object: str  # the answer's `object`
    id_prefix: str

    async def prepare(
        self, ctx: EngineContext, target: CallTarget, req: Any, raw_body: bytes, received: float
    ) -> Prepared:
        refuse_unsupported(req)
        ctx.check_model(req.model)
        return await self.plan(ctx, target, req, raw_body, received)

    @abstractmethod
    async def plan(
        self, ctx: EngineContext, target: CallTarget, req: Any, raw_body: bytes, received: float
    ) -> Prepared:
        """The checked request's prompt, planned."""

    @abstractmethod
    def reason(self, o: Outcome) -> str:
        """The choice's `finish_reason`."""

    @abstractmethod
    def payload(self, o: Outcome) -> dict[str, Any]:
        """The choice's reply fields (`message`, or `text`)."""

    @abstractmethod
    def logprobs(self, ctx: EngineContext, o: Outcome) -> dict[str, Any]:
        """The choice's logprobs in this wire's shape."""

    def answer(self, ctx: EngineContext, p: Prepared, outcomes: list[Outcome]) -> dict[str, Any]:
        req = p.req
        choices = []
        for index, o in enumerate(outcomes):
            choice: dict[str, Any] = {
                "index": index,
                **self.payload(o),
                "logprobs": None,
                "finish_reason": self.reason(o),
            }
            if wants_logprobs(req):
                choice["logprobs"] = self.logprobs(ctx, o)
            if req.return_token_ids:
                choice["token_ids"] = o.sampled.ids.tolist()
            choices.append(choice)
        body: dict[str, Any] = {
            "id": f"{self.id_prefix}-{outcomes[0].call_id}",
            "object": self.object,
            "created": int(time.time()),
            "model": req.model,
            "system_fingerprint": f"roost-{outcomes[0].sampled.weight_version}",
            "choices": choices,
            "usage": usage(len(p.plan.prompt_ids), sum(len(o.sampled.ids) for o in outcomes), p.plan.shared_prefix_len),
        }
        if req.return_token_ids:
            body["prompt_token_ids"] = p.plan.prompt_ids.tolist()
        return body


class OpenAIStreamer(ABC):
    """Chunks of `kind` (`chat.completion.chunk`, `text_completion`), then `[DONE]`;
    subclasses frame the reply's pieces."""

    kind: str

    def __init__(self, front: OpenAIFront, ctx: EngineContext, p: Prepared, call_id: str, weight_version: str):
        self.front, self.ctx, self.p = front, ctx, p
        self.rid, self.created = f"{front.id_prefix}-{call_id}", int(time.time())
        self.fingerprint = f"roost-{weight_version}"

    def chunk(self, choices: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> bytes:
        return sse(chunk(self.kind, self.rid, self.created, self.p.model, self.fingerprint, choices, extra))

    @abstractmethod
    def last_choice(self, o: Outcome) -> dict[str, Any]:
        """The final chunk's choice, before its token ids."""

    def closing(self, o: Outcome) -> list[bytes]:
        req, plan = self.p.req, self.p.plan
        # The reply's text went out in pieces that do not split at token boundaries, so all its
        # logprobs ride on the last chunk: a client concatenating the chunks' logprobs gets each once.
        logprobs = self.front.logprobs(self.ctx, o) if wants_logprobs(req) else None
        choice = {**self.last_choice(o), "logprobs": logprobs, "finish_reason": self.front.reason(o)}
        extra = None
        if req.return_token_ids:
            choice["token_ids"] = o.sampled.ids.tolist()
            extra = {"prompt_token_ids": plan.prompt_ids.tolist()}
        frames = [self.chunk([choice], extra)]
        if req.stream_options is not None and req.stream_options.include_usage:
            frames.append(
                self.chunk([], {"usage": usage(len(plan.prompt_ids), len(o.sampled.ids), plan.shared_prefix_len)})
            )
        return frames + [SSE_DONE]

    def failure(self, error: GatewayError) -> bytes:
        return b"data: " + error.body() + b"\n\n"
