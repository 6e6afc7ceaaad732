"""The `openai` backend: pass calls through to any OpenAI-compatible server, recording them.

It implements `backend.Backend` for the wires OpenAI's servers speak (chat and text
completions); other wires are refused with a 400 naming the backends that serve them.

roost does not render or tokenize here: the upstream server does. Each call is recorded
with its messages and reply as text, and with what the upstream returns of the tokens: the
gateway asks for each sampled token's logprob and for token ids (`return_token_ids`, which
vLLM and roost's own gateway honour) and gives the harness its answer as it asked for it
(`passthrough_tokens`). Calls with ids join the agent's token tree like any other; what an
upstream leaves out is recorded as absent, and such calls are not training data
(`CallRecord.untrainable`).
"""

from __future__ import annotations

import asyncio
import time
from array import array
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive

from roost.rollout.gateway.config import GatewayConfig
from roost.rollout.gateway.core.errors import BackendUnavailable, GatewayError, InvalidRequest
from roost.rollout.gateway.core.metrics import GatewayMetrics
from roost.rollout.gateway.core.passthrough_tokens import (
    LOGPROBS,
    Added,
    StreamAccumulator,
    as_asked,
    ask_for_tokens,
    logprob_values,
    prompt_ids_of,
    refused_parameter,
    sampled_logprobs,
)
from roost.rollout.gateway.core.recording import CallTarget, new_id
from roost.rollout.gateway.core.template_messages import (
    chain_keys,
    extend_chain,
    header_key,
    message_key,
    reply_message_key,
    to_template,
    tool_dicts,
)
from roost.rollout.gateway.core.token_tree import AgentTree, Node
from roost.rollout.store.records import CallRecord
from roost.tracing import Tracing


class UpstreamError(GatewayError):
    """An upstream 4xx, answered with the upstream's own status and message."""

    type = "invalid_request_error"
    code = "upstream_rejected"

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class PassthroughBackend:
    def __init__(self, config: GatewayConfig, record: Any, metrics: GatewayMetrics, tracing: Tracing | None = None):
        if not config.engine_url:
            raise ValueError("--backend openai needs --engine-url: the upstream's base URL, e.g. http://host:8000/v1")
        self.config = config
        self.base = config.engine_url.rstrip("/")
        self.record_call = record
        self.metrics = metrics
        self.tracing = tracing or Tracing()
        self.served_model = config.served_model_name or config.upstream_model or "upstream"
        self.refused: set[str] = set()
        """Parameters the gateway adds that this upstream refused: not sent again."""
        self._http: aiohttp.ClientSession | None = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            headers = (
                {"Authorization": f"Bearer {self.config.upstream_api_key}"} if self.config.upstream_api_key else {}
            )
            self._http = aiohttp.ClientSession(
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.config.engine_timeout_s, sock_connect=5),
                connector=aiohttp.TCPConnector(limit=1024),
                trace_configs=self.tracing.aiohttp_trace_configs(),
            )
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    def _unavailable(self, detail: str) -> BackendUnavailable:
        self.metrics.engine_errors.labels("upstream_unavailable").inc()
        return BackendUnavailable(
            f"the upstream server {self.base} is unavailable ({detail}); the session is kept, retry",
            retry_after_s=self.config.retry_after_s,
            code="upstream_unavailable",
        )

    def _upstream_body(self, raw: bytes, path: str) -> tuple[dict[str, Any], Added]:
        body = orjson.loads(raw)
        if self.config.upstream_model:
            body["model"] = self.config.upstream_model
        return body, ask_for_tokens(body, path, self.refused, self.config.upstream_token_ids)

    def _forwardable(self, front: Any) -> str:
        if front.passthrough_path is None:
            raise InvalidRequest(
                f"the {front.endpoint} wire is not served by --backend openai, which forwards OpenAI chat and text "
                "completions only; run the gateway on a token engine (--backend vllm, sglang or embedded) for it"
            )
        return front.passthrough_path

    async def call(
        self, front: Any, target: CallTarget, req: Any, raw_body: bytes, received: float, receive: Receive
    ) -> Response:
        path = self._forwardable(front)
        if getattr(req, "allowed_replies", None) is not None:
            raise InvalidRequest(
                "allowed_replies is roost's extension, which an OpenAI upstream cannot honour; "
                "run the gateway on a token engine (--backend vllm, sglang or embedded) for it",
                param="allowed_replies",
            )
        messages, tools = front.key_messages(req)
        call = _Forwarded(front.endpoint, path, target, raw_body, messages, tools, time.perf_counter())
        return await self._forward(call, req.stream)

    async def count_tokens(self, front: Any, target: CallTarget, req: Any, raw_body: bytes) -> int:
        self._forwardable(front)
        raise InvalidRequest(
            "counting tokens needs the model's tokenizer, which --backend openai does not hold; "
            "run the gateway on a token engine (--backend vllm, sglang or embedded)"
        )

    async def model_cards(self) -> list[dict[str, Any]]:
        return orjson.loads((await self.models()).body).get("data", [])

    async def engine_health(self) -> str:
        return "n/a"  # the upstream is someone else's server: its health is not the gateway's

    async def session_finished(self, session_id: str) -> None:
        """The upstream keeps nothing of the gateway's sessions."""

    async def models(self) -> Response:
        try:
            async with self._session().get(f"{self.base}/models") as resp:
                raw = await resp.read()
                status = resp.status
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise self._unavailable(repr(exc)) from exc
        _check(status, raw, self)
        return Response(raw, media_type="application/json")

    async def _post(self, call: _Forwarded) -> aiohttp.ClientResponse:
        """Send the call upstream; where it refuses a parameter the gateway added, again without it."""
        while True:
            body, call.added = self._upstream_body(call.raw, call.path)
            try:
                resp = await self._session().post(f"{self.base}/{call.path}", json=body)
            except (TimeoutError, aiohttp.ClientError) as exc:
                raise self._unavailable(repr(exc)) from exc
            if resp.status != 400 or not call.added.names():
                return resp
            data = await self._read(resp)
            refused = refused_parameter(resp.status, _error(data), call.added)
            if refused is None:
                raise _failure(resp.status, data, self)
            self.refused.add(refused)

    async def _read(self, resp: aiohttp.ClientResponse) -> bytes:
        try:
            return await resp.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise self._unavailable(repr(exc)) from exc
        finally:
            resp.release()

    async def _forward(self, call: _Forwarded, stream: bool) -> Response:
        resp = await self._post(call)
        if resp.status < 400 and stream:
            return StreamingResponse(self._relay(call, resp), media_type="text/event-stream")
        data = await self._read(resp)
        _check(resp.status, data, self)
        try:
            answer = orjson.loads(data)
            choices = answer["choices"]
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise self._unavailable(f"answer is not an OpenAI response: {data[:200]!r}") from exc
        await self._record(call, answer, choices)
        if as_asked(answer, call.added):
            data = orjson.dumps(answer)
        return Response(data, media_type="application/json")

    async def _relay(self, call: _Forwarded, resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
        acc = StreamAccumulator()
        held: list[bytes] = []
        try:
            async for line in resp.content:
                if not line.strip():
                    continue
                frame = self._relayed(line, acc, call.added)
                # Hold back the end of the stream until the call is stored.
                if acc.finished or line.strip().replace(b" ", b"") == b"data:[DONE]":
                    held.append(frame)
                else:
                    yield frame
            answer, choices = acc.result()
            await self._record(call, answer, choices)
            for frame in held:
                yield frame
        except (TimeoutError, aiohttp.ClientError) as exc:
            yield b"data: " + self._unavailable(repr(exc)).body() + b"\n\n"
        finally:
            resp.release()

    @staticmethod
    def _relayed(line: bytes, acc: StreamAccumulator, added: Added) -> bytes:
        """One upstream stream line as the harness gets it, after `acc` took what it records."""
        data = line.strip()[5:].strip() if line.startswith(b"data:") else None
        if data is not None and data != b"[DONE]":
            try:
                chunk = orjson.loads(data)
            except orjson.JSONDecodeError:
                chunk = None
            if isinstance(chunk, dict):
                acc.add(chunk)
                if as_asked(chunk, added):
                    return b"data: " + orjson.dumps(chunk) + b"\n\n"
        return line if line.endswith(b"\n\n") else line.rstrip(b"\n") + b"\n\n"

    async def _record(self, call: _Forwarded, answer: dict, choices: list) -> None:
        tree = call.target.session.tree(call.target.agent)
        messages, tools = call.messages, call.tools
        chain = chain_keys(header_key(tools, None), [message_key(m) for m in messages]) if messages else None
        records = [self._call(call, tree, chain, answer, choice) for choice in choices]
        await asyncio.gather(*(self.record_call(r) for r, _ in records))
        for record, node in records:
            if node is not None:
                tree.add(node)
            self.metrics.calls.labels(call.endpoint, record.kind, record.reuse).inc()

    def _call(
        self, call: _Forwarded, tree: AgentTree, chain, answer: dict, choice: dict
    ) -> tuple[CallRecord, Node | None]:
        target = call.target
        prompt_ids, sampled, logprobs = _tokens(answer, choice)
        message = choice.get("message") or {"text": choice.get("text")}
        parent, shared, kind = None, 0, "text"
        if prompt_ids:
            candidates = tree.related(chain) if chain else tree.newest()
            parent, shared = AgentTree.best_prefix(prompt_ids, candidates)
            kind = "root" if parent is None else ("extend" if shared == parent.path_len else "fork")
        reply_key = None
        if chain is not None and isinstance(message, dict):
            calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or ()]
            reply_key = extend_chain(chain[-1], reply_message_key(message.get("content"), calls))
        call_id = new_id()
        trace = self.tracing.current()  # the call's `gateway.call` span
        record = CallRecord(
            call_id=call_id,
            session_id=target.session.session_id,
            agent_id=target.agent,
            parent_agent=target.parent_agent,
            seq=target.session.take_seq(),
            endpoint=call.endpoint,
            backend="openai",
            model=str(answer.get("model", "")),
            parent_call_id=parent.call_id if parent else None,
            shared_prefix_len=shared,
            kind=kind,
            reuse="none",
            prompt_ids=prompt_ids,
            sampled_ids=sampled,
            sampled_logprobs=logprobs,
            finish_reason={"type": choice.get("finish_reason")},
            sampling_params={},
            weight_version=str(answer.get("system_fingerprint") or "upstream"),
            timings={"total_ms": (time.perf_counter() - call.started) * 1e3},
            request=orjson.Fragment(call.raw),
            response={"message": message, "finish_reason": choice.get("finish_reason"), "id": answer.get("id")},
            created_at=time.time(),
            prompt_key=chain[-1].hex() if chain else "",
            reply_key=reply_key.hex() if reply_key else "",
            trace_id=trace.trace_id,
            span_id=trace.span_id,
        )
        node = None
        if kind != "text":
            path_ids = array("i", prompt_ids)
            path_ids.extend(sampled)
            node = Node(call_id, path_ids, len(prompt_ids), False, "", chain[-1] if chain else None, reply_key)
        return record, node


@dataclass
class _Forwarded:
    """One call on its way through the pass-through."""

    endpoint: str
    """The wire's name, recorded with the call (`chat`, `completions`)."""
    path: str
    target: CallTarget
    raw: bytes
    messages: list | None
    tools: list | None
    started: float
    added: Added = Added()


def _tokens(answer: dict, choice: dict) -> tuple[array, array, array]:
    """A choice's prompt ids, sampled ids and their logprobs, as the upstream returned them;
    without both kinds of ids none are kept (the call cannot join the token tree), and without
    a logprob for each sampled id none are kept (never a stand-in value)."""
    prompt, sampled = prompt_ids_of(answer, choice), choice.get("token_ids")
    if not prompt or sampled is None:
        return array("i"), array("i"), array("d")
    return (
        array("i", prompt),
        array("i", sampled),
        array("d", sampled_logprobs(logprob_values(choice.get(LOGPROBS)), len(sampled))),
    )


def _error(raw: bytes) -> dict[str, Any]:
    try:
        error = orjson.loads(raw)["error"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return {"message": raw.decode(errors="replace")[:500]}
    return error if isinstance(error, dict) else {"message": str(error)}


def _check(status: int, raw: bytes, owner: PassthroughBackend) -> None:
    if status >= 400:
        raise _failure(status, raw, owner)


def _failure(status: int, raw: bytes, owner: PassthroughBackend) -> GatewayError:
    message = _error(raw).get("message")
    if status >= 500 or status == 429:
        return owner._unavailable(f"it answered {status}: {message}")
    return UpstreamError(status, f"the upstream server refused the call ({status}): {message}")


def template_messages(req: Any) -> tuple[list | None, list | None]:
    """The messages and tools of a chat request as dicts, for keys (no rendering here); image
    parts are kept: the upstream model reads them."""
    messages = to_template(req.messages, model=None) if getattr(req, "messages", None) is not None else None
    return messages, tool_dicts(getattr(req, "tools", None))
