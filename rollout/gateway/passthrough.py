"""The `openai` backend: pass calls through to any OpenAI-compatible server, recording them.

It implements `backend.Backend` for the wires OpenAI's servers speak (chat and text
completions); other wires are refused with a 400 naming the backends that serve them.

roost does not render or tokenize here: the upstream server does. Each call is recorded
with its messages and reply as text, and with token ids where the upstream returns them
(`prompt_token_ids` and per-choice `token_ids`, as vLLM and roost's own gateway do when
asked with `return_token_ids`); calls with ids join the agent's token tree like any other.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive

from roost.tracing import Tracing

from ..store.records import CallRecord
from .config import GatewayConfig
from .errors import BackendUnavailable, GatewayError, InvalidRequest
from .messages import chain_keys, extend_chain, header_key, message_key, reply_message_key, to_template, tool_dicts
from .metrics import GatewayMetrics
from .recording import CallTarget, new_id
from .token_tree import AgentTree, Node


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
        self._http: aiohttp.ClientSession | None = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            headers = {"Authorization": f"Bearer {self.config.upstream_api_key}"} if self.config.upstream_api_key else {}
            self._http = aiohttp.ClientSession(
                headers=headers, timeout=aiohttp.ClientTimeout(total=self.config.engine_timeout_s, sock_connect=5),
                connector=aiohttp.TCPConnector(limit=1024), trace_configs=self.tracing.aiohttp_trace_configs(),
            )
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    def _unavailable(self, detail: str) -> BackendUnavailable:
        self.metrics.engine_errors.labels("upstream_unavailable").inc()
        return BackendUnavailable(f"the upstream server {self.base} is unavailable ({detail}); the session is kept, retry",
                                  retry_after_s=self.config.retry_after_s, code="upstream_unavailable")

    def _upstream_body(self, raw: bytes) -> dict[str, Any]:
        body = orjson.loads(raw)
        if self.config.upstream_model:
            body["model"] = self.config.upstream_model
        if self.config.upstream_token_ids:
            body["return_token_ids"] = True
        return body

    def _forwardable(self, front: Any) -> str:
        if front.passthrough_path is None:
            raise InvalidRequest(
                f"the {front.endpoint} wire is not served by --backend openai, which forwards OpenAI chat and text "
                "completions only; run the gateway on a token engine (--backend embedded or sglang) for it")
        return front.passthrough_path

    async def call(self, front: Any, target: CallTarget, req: Any, raw_body: bytes, received: float,
                   receive: Receive) -> Response:
        path = self._forwardable(front)
        if getattr(req, "allowed_replies", None) is not None:
            raise InvalidRequest("allowed_replies is roost's extension, which an OpenAI upstream cannot honour; "
                                 "run the gateway on a token engine (--backend embedded or sglang) for it",
                                 param="allowed_replies")
        messages, tools = front.key_messages(req)
        return await self._forward(path, target, raw_body, messages, tools, req.stream)

    async def count_tokens(self, front: Any, target: CallTarget, req: Any, raw_body: bytes) -> int:
        self._forwardable(front)
        raise InvalidRequest("counting tokens needs the model's tokenizer, which --backend openai does not hold; "
                             "run the gateway on a token engine (--backend embedded or sglang)")

    async def model_cards(self) -> list[dict[str, Any]]:
        return orjson.loads((await self.models()).body).get("data", [])

    async def engine_health(self) -> str:
        return "n/a"  # the upstream is someone else's server: its health is not the gateway's

    async def models(self) -> Response:
        try:
            async with self._session().get(f"{self.base}/models") as resp:
                raw = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise self._unavailable(repr(exc)) from exc
        _check(status, raw, self)
        return Response(raw, media_type="application/json")

    async def _forward(self, path: str, target: CallTarget, raw: bytes, messages: list | None, tools: list | None,
                       stream: bool) -> Response:
        body = self._upstream_body(raw)
        started = time.perf_counter()
        url = f"{self.base}/{path}"
        try:
            resp = await self._session().post(url, json=body)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise self._unavailable(repr(exc)) from exc
        if resp.status >= 400 or not stream:
            try:
                data = await resp.read()
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                raise self._unavailable(repr(exc)) from exc
            finally:
                resp.release()
            _check(resp.status, data, self)
            try:
                answer = orjson.loads(data)
                choices = answer["choices"]
            except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
                raise self._unavailable(f"answer is not an OpenAI response: {data[:200]!r}") from exc
            await self._record(path, target, raw, messages, tools, answer, choices, started)
            return Response(data, media_type="application/json")
        return StreamingResponse(self._relay(path, target, raw, messages, tools, resp, started),
                                 media_type="text/event-stream")

    async def _relay(self, path, target, raw, messages, tools, resp, started) -> AsyncIterator[bytes]:
        acc = _StreamAccumulator()
        held: list[bytes] = []
        try:
            async for line in resp.content:
                if not line.strip():
                    continue
                data = line.strip()[5:].strip() if line.startswith(b"data:") else None
                if data is not None and data != b"[DONE]":
                    try:
                        acc.add(orjson.loads(data))
                    except orjson.JSONDecodeError:
                        pass
                frame = line if line.endswith(b"\n\n") else line.rstrip(b"\n") + b"\n\n"
                # Hold back the end of the stream until the call is stored.
                if acc.finished or data == b"[DONE]":
                    held.append(frame)
                else:
                    yield frame
            answer, choices = acc.result()
            await self._record(path, target, raw, messages, tools, answer, choices, started)
            for frame in held:
                yield frame
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            yield b"data: " + self._unavailable(repr(exc)).body() + b"\n\n"
        finally:
            resp.release()

    async def _record(self, path, target: CallTarget, raw: bytes, messages, tools, answer: dict, choices: list,
                      started: float) -> None:
        tree = target.session.tree(target.agent)
        chain = chain_keys(header_key(tools, None), [message_key(m) for m in messages]) if messages else None
        prompt_ids = array("i", answer.get("prompt_token_ids") or [])
        records = []
        for choice in choices:
            records.append(self._call(path, target, tree, chain, raw, answer, choice, prompt_ids, started))
        await asyncio.gather(*(self.record_call(r) for r, _ in records))
        for record, node in records:
            if node is not None:
                tree.add(node)
            self.metrics.calls.labels(path, record.kind, record.reuse).inc()

    def _call(self, path, target, tree, chain, raw, answer, choice, prompt_ids, started) -> tuple[CallRecord, Node | None]:
        sampled = array("i", choice.get("token_ids") or [])
        logprobs = array("d", _logprobs(choice, len(sampled)))
        message = choice.get("message") or {"text": choice.get("text")}
        parent, shared, kind = None, 0, "text"
        if prompt_ids and sampled:
            candidates = tree.related(chain) if chain else tree.newest()
            parent, shared = AgentTree.best_prefix(prompt_ids, candidates)
            kind = "root" if parent is None else ("extend" if shared == parent.path_len else "fork")
        reply_key = None
        if chain is not None and isinstance(message, dict):
            calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or ()]
            reply_key = extend_chain(chain[-1], reply_message_key(message.get("content"), calls))
        call_id = new_id()
        now = time.perf_counter()
        trace = self.tracing.current()  # the call's `gateway.call` span
        record = CallRecord(
            call_id=call_id, session_id=target.session.session_id, agent_id=target.agent,
            parent_agent=target.parent_agent, seq=target.session.take_seq(), endpoint=path.split("/")[-1],
            backend="openai", model=str(answer.get("model", "")),
            parent_call_id=parent.call_id if parent else None, shared_prefix_len=shared, kind=kind, reuse="none",
            prompt_ids=prompt_ids, sampled_ids=sampled, sampled_logprobs=logprobs,
            finish_reason={"type": choice.get("finish_reason")}, sampling_params={},
            weight_version=str(answer.get("system_fingerprint") or "upstream"),
            timings={"total_ms": (now - started) * 1e3}, request=orjson.Fragment(raw),
            response={"message": message, "finish_reason": choice.get("finish_reason"), "id": answer.get("id")},
            created_at=time.time(), prompt_key=chain[-1].hex() if chain else "",
            reply_key=reply_key.hex() if reply_key else "", trace_id=trace.trace_id, span_id=trace.span_id,
        )
        node = None
        if kind != "text":
            path_ids = array("i", prompt_ids)
            path_ids.extend(sampled)
            node = Node(call_id, path_ids, len(prompt_ids), False, "", chain[-1] if chain else None, reply_key)
        return record, node


def _check(status: int, raw: bytes, owner: PassthroughBackend) -> None:
    if status < 400:
        return
    try:
        message = orjson.loads(raw)["error"]["message"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        message = raw.decode(errors="replace")[:500]
    if status >= 500 or status == 429:
        raise owner._unavailable(f"it answered {status}: {message}")
    raise UpstreamError(status, f"the upstream server refused the call ({status}): {message}")


def _logprobs(choice: dict, n: int) -> list[float]:
    content = ((choice.get("logprobs") or {}).get("content")) or []
    values = [float(c.get("logprob", 0.0)) for c in content]
    return values if len(values) == n else [0.0] * n


class _StreamAccumulator:
    """Rebuilds the full answer from OpenAI stream chunks, to record it."""

    def __init__(self) -> None:
        self.answer: dict[str, Any] = {}
        self.choices: dict[int, dict[str, Any]] = {}
        self.finished = False

    def add(self, chunk: dict[str, Any]) -> None:
        for key in ("id", "model", "system_fingerprint", "prompt_token_ids", "usage"):
            if chunk.get(key) is not None:
                self.answer[key] = chunk[key]
        for c in chunk.get("choices") or ():
            slot = self.choices.setdefault(c.get("index", 0), {"content": "", "reasoning": "", "text": "",
                                                               "calls": {}, "token_ids": [], "finish_reason": None})
            delta = c.get("delta") or {}
            slot["content"] += delta.get("content") or ""
            slot["reasoning"] += delta.get("reasoning_content") or ""
            slot["text"] += c.get("text") or ""
            slot["token_ids"] += c.get("token_ids") or []
            for call in delta.get("tool_calls") or ():
                entry = slot["calls"].setdefault(call.get("index", 0), {"id": None, "name": "", "arguments": ""})
                entry["id"] = call.get("id") or entry["id"]
                fn = call.get("function") or {}
                entry["name"] += fn.get("name") or ""
                entry["arguments"] += fn.get("arguments") or ""
            if c.get("finish_reason"):
                slot["finish_reason"] = c["finish_reason"]
                self.finished = True

    def result(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        choices = []
        for index, slot in sorted(self.choices.items()):
            calls = [{"id": e["id"], "type": "function", "function": {"name": e["name"], "arguments": e["arguments"]}}
                     for _, e in sorted(slot["calls"].items())]
            message: dict[str, Any] = {"role": "assistant", "content": slot["content"] or (None if calls else "")}
            if slot["reasoning"]:
                message["reasoning_content"] = slot["reasoning"]
            if calls:
                message["tool_calls"] = calls
            choice = {"index": index, "finish_reason": slot["finish_reason"], "token_ids": slot["token_ids"]}
            if slot["text"]:
                choice["text"] = slot["text"]
            else:
                choice["message"] = message
            choices.append(choice)
        return self.answer, choices


def template_messages(req: Any) -> tuple[list | None, list | None]:
    """The messages and tools of a chat request as dicts, for keys (no rendering here); image
    parts are kept: the upstream model reads them."""
    messages = to_template(req.messages, model=None) if getattr(req, "messages", None) is not None else None
    return messages, tool_dicts(getattr(req, "tools", None))
