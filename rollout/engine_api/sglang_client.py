"""One async client for SGLang's native API.

The gateway talks to the embedded engine and to a real SGLang server through this client
alone. Requests are built with the engine's own request models and answers read with its
answer models (`roost.rollout.engine_api.wire`, which imports nothing of the server); their fields
follow SGLang's own protocol classes (`GenerateReqInput`, `SamplingParams`, the `meta_info` of
`/generate`), and the contract tests check the requests with those classes so the two cannot
drift apart.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Self

import aiohttp
import orjson
from pydantic import BaseModel, ValidationError

from roost.rollout.engine_api.capacity import EngineCapacity, sglang_capacity
from roost.rollout.engine_api.routed_experts import MalformedRoutedExperts, RoutedExperts
from roost.rollout.engine_api.sglang_sessions import SessionCall, StreamingSessions
from roost.rollout.engine_api.wire import (
    AbortRequest,
    CloseSessionRequest,
    GenerateAnswer,
    GenerateRequest,
    LoadLoraRequest,
    OpenSessionRequest,
    PauseRequest,
    UnloadLoraRequest,
    UpdateWeightsAnswer,
    UpdateWeightsRequest,
    UpdateWeightVersionRequest,
)
from roost.rollout.keys import bearer

JSON_HEADERS = {"Content-Type": "application/json"}
log = logging.getLogger(__name__)


class EngineError(Exception):
    """The rollout engine could not serve a request."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class EngineUnavailable(EngineError):
    """The engine is down, timed out, or failed (5xx): retry later."""


class EngineRejected(EngineError):
    """The engine refused the request as invalid (4xx): do not retry unchanged."""


class EngineProtocolError(EngineError):
    """The engine answered something that is not SGLang's answer format."""


class _SendWhole(Exception):
    """A streaming-session call must be sent again as a plain call of its whole prompt."""


@dataclass
class Generation:
    """One finished `/generate` answer, reduced to what roost records."""

    output_ids: list[int]
    output_logprobs: list[float]
    finish_reason: dict[str, Any]
    weight_version: str
    prompt_tokens: int
    text: str = ""
    meta_info: dict[str, Any] = field(default_factory=dict)
    routed_experts: RoutedExperts | None = None
    """Asked with `routed_experts=True` (a mixture-of-experts model): the experts every token of
    prompt and output went to, per layer, but the last output token's (never run through the model)."""


@dataclass
class GenerationDelta:
    """The tokens one streamed chunk added; `finish_reason` is set on the last chunk."""

    output_ids: list[int]
    output_logprobs: list[float]
    finish_reason: dict[str, Any] | None
    weight_version: str
    routed_experts: RoutedExperts | None = None
    """On the last chunk, when asked: as `Generation.routed_experts`."""


def _routed_experts(data: str | None, rows: int) -> RoutedExperts | None:
    """SGLang's `meta_info.routed_experts` of an answer that ran `rows` tokens through the model."""
    if data is None:
        return None
    try:
        return RoutedExperts.decode(data, rows)
    except MalformedRoutedExperts as exc:
        raise EngineProtocolError(str(exc)) from exc


def _logprob_values(entries: list[Any]) -> list[float]:
    # SGLang: meta_info.output_token_logprobs = [[logprob, token_id, text|None], ...]
    try:
        return [float(entry[0]) for entry in entries]
    except (TypeError, ValueError, IndexError) as exc:
        raise EngineProtocolError(f"malformed output_token_logprobs: {entries[:3]!r}") from exc


def _answer(body: Any, what: str) -> GenerateAnswer:
    try:
        return GenerateAnswer.model_validate(body)
    except ValidationError as exc:
        raise EngineProtocolError(f"not an SGLang {what}: {str(body)[:200]}") from exc


def prompt_scores(entries: list[Any] | None, length: int, url: str) -> list[float]:
    """`input_token_logprobs` as floats, one per prompt token (None → NaN), checked for length."""
    if entries is None or len(entries) != length:
        got = "none" if entries is None else len(entries)
        raise EngineProtocolError(
            f"engine at {url} answered {got} prompt logprobs for a prompt of {length} tokens "
            "(an SGLang-API engine returns input_token_logprobs with return_logprob and logprob_start_len 0)"
        )
    try:
        return [math.nan if entry[0] is None else float(entry[0]) for entry in entries]
    except (TypeError, ValueError, IndexError) as exc:
        raise EngineProtocolError(f"malformed input_token_logprobs from {url}: {entries[:3]!r}") from exc


def parse_generation(body: Any) -> Generation:
    """Read a non-streamed `/generate` answer, checking SGLang's field names."""
    answer = _answer(body, "/generate answer")
    meta = answer.meta_info
    generation = Generation(
        output_ids=answer.output_ids,
        output_logprobs=_logprob_values(meta.output_token_logprobs or []),
        finish_reason=meta.finish_reason or {"type": "unknown"},
        weight_version=meta.weight_version,
        prompt_tokens=meta.prompt_tokens,
        text=answer.text,
        meta_info=body["meta_info"],
        routed_experts=_routed_experts(meta.routed_experts, meta.prompt_tokens + len(answer.output_ids) - 1),
    )
    if len(generation.output_logprobs) != len(answer.output_ids):
        raise EngineProtocolError(f"{len(answer.output_ids)} output ids but {len(generation.output_logprobs)} logprobs")
    return generation


def request_body(request: BaseModel) -> dict[str, Any]:
    """The fields set on `request`, None left out, in the model's order. The values go as they
    are (no copy through `model_dump`: a /generate prompt can be tens of thousands of ids)."""
    given = request.model_fields_set
    return {
        name: value
        for name in type(request).model_fields
        if name in given and (value := getattr(request, name)) is not None
    }


class EngineHTTP:
    """The HTTP plumbing of an engine client: one pooled aiohttp session, JSON requests, errors
    mapped to `EngineError`s. `api_key` (the engine's `--api-key`) goes with every request as a
    bearer token."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        connect_timeout_s: float = 5.0,
        max_connections: int = 1024,
        trace_configs: list[aiohttp.TraceConfig] | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self._trace_configs = trace_configs  # roost.tracing: client spans, traceparent to the engine
        self._headers = {**JSON_HEADERS, **bearer(api_key)}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=connect_timeout_s)
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._max_connections, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, trace_configs=self._trace_configs
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _request(
        self, method: str, path: str, payload: dict[str, Any] | None = None, *, raw: bytes | None = None
    ) -> Any:
        """`payload` goes as JSON; `raw`, instead, as application/octet-stream bytes."""
        url = f"{self.base_url}{path}"
        headers = self._headers if raw is None else {**self._headers, "Content-Type": "application/octet-stream"}
        try:
            body = raw if raw is not None else None if payload is None else orjson.dumps(payload)
            async with self._http().request(method, url, data=body, headers=headers) as resp:
                raw = await resp.read()
                _raise_for_status(resp.status, raw, url)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise EngineUnavailable(f"engine at {self.base_url} unreachable: {exc!r}") from exc
        return _decode_json(raw, url)

    async def get_text(self, path: str) -> str:
        """GET a route that answers text (Prometheus' `/metrics`)."""
        url = f"{self.base_url}{path}"
        try:
            async with self._http().get(url, headers=self._headers) as resp:
                raw = await resp.read()
                _raise_for_status(resp.status, raw, url)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise EngineUnavailable(f"engine at {self.base_url} unreachable: {exc!r}") from exc
        return raw.decode("utf-8", "replace")

    async def post(self, path: str, payload: dict[str, Any] | None = None, *, raw: bytes | None = None) -> Any:
        """POST `payload` as JSON, or `raw` bytes, to a route of the engine; its decoded answer."""
        return await self._request("POST", path, payload, raw=raw)

    async def _stream(self, path: str, payload: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """POST `payload` and yield the decoded `data:` chunks of the server-sent-event answer."""
        url = f"{self.base_url}{path}"
        try:
            async with self._http().post(url, data=orjson.dumps(payload), headers=self._headers) as resp:
                if resp.status >= 400:
                    _raise_for_status(resp.status, await resp.read(), url)
                async for line in resp.content:
                    chunk = _sse_data(line)
                    if chunk is not None:
                        yield chunk
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise EngineUnavailable(f"engine stream from {self.base_url} broke: {exc!r}") from exc

    async def health(self) -> bool:
        try:
            await self._request("GET", "/health")
        except EngineError:
            return False
        return True

    async def lora_adapters(self) -> list[str]:
        """The names of the LoRA adapters loaded: `/v1/models`' cards with a parent (vLLM's list,
        which roost's engine serves too)."""
        cards = (await self._request("GET", "/v1/models")).get("data") or []
        return [card["id"] for card in cards if isinstance(card, dict) and card.get("parent") and "id" in card]


class SessionMode(StrEnum):
    """How a client tells the engine which program a call is part of."""

    NONE = "none"
    """No session_params: the engine's prefix cache alone finds what a call shares with the last."""
    NAMED = "named"
    """roost's engine: `session_params.id` names the program, the whole prompt is sent, and the
    engine keeps the program's slot between its calls."""
    STREAMING = "streaming"
    """SGLang's streaming sessions (`--enable-streaming-session`): a call that extends the last
    one sends only its new tokens (`roost.rollout.engine_api.sglang_sessions`)."""


class SGLangClient(EngineHTTP):
    """Async client for `/generate` and the control endpoints of an SGLang-API server: roost's
    engine asks for the key on its control routes, SGLang on every route but `/health`.
    `sessions`: how a call names its program (`SessionMode`); `close_session` ends one. Whatever
    the mode, a call answers for its whole prompt (`Generation.prompt_tokens` counts all of it).
    """

    def __init__(self, base_url: str, *, sessions: SessionMode = SessionMode.NONE, **kwargs: Any):
        super().__init__(base_url, **kwargs)
        self.sessions = sessions
        self._streaming = StreamingSessions()

    def route(self, input_ids: list[int], rid: str | None, session: str | None) -> SessionCall:
        """How a call of `session` with the whole prompt `input_ids` goes; in streaming mode a
        session call counts as running until its answer (or failure) is settled."""
        if session and self.sessions is SessionMode.STREAMING:
            return self._streaming.plan(session, input_ids, rid)
        named = {"id": session} if session and self.sessions is SessionMode.NAMED else None
        return SessionCall(list(input_ids), rid, named)

    def generate_payload(
        self,
        call: SessionCall,
        sampling_params: dict[str, Any],
        *,
        stream: bool,
        lora: str | None = None,
        routed_experts: bool = False,
        image_data: list[str] | None = None,
    ) -> dict[str, Any]:
        # Not validated: this runs for every model call, and validating a long prompt's ids
        # costs several times what sending them does (the contract tests check the payload
        # against both roost's engine and SGLang's GenerateReqInput).
        request = GenerateRequest.model_construct(
            input_ids=call.input_ids,
            sampling_params=dict(sampling_params),
            return_logprob=True,
            stream=stream,
            rid=call.rid,
            lora_path=lora,
            session_params=call.session_params,
            # SGLang 0.5.3 has no such field: sent only when asked
            return_routed_experts=True if routed_experts else None,
            image_data=image_data,
        )
        return request_body(request)

    def score_payload(self, input_ids: list[int], lora: str | None = None) -> dict[str, Any]:
        """SGLang's ask for a prompt's logprobs and nothing sampled."""
        request = GenerateRequest(
            input_ids=input_ids,
            sampling_params={"max_new_tokens": 0, "temperature": 0.0},
            return_logprob=True,
            logprob_start_len=0,
            lora_path=lora,
        )
        return request_body(request)

    async def score(self, input_ids: list[int], *, lora: str | None = None) -> list[float]:
        """The model's logprob of each of `input_ids` given the ones before it (NaN for the first,
        which has no context): a teacher's scores of a student's tokens, by id."""
        answer = _answer(
            await self._request("POST", "/generate", self.score_payload(input_ids, lora)), "/generate answer"
        )
        return prompt_scores(answer.meta_info.input_token_logprobs, len(input_ids), self.base_url)

    def open_session_payload(self, session: str) -> dict[str, Any]:
        # capacity_of_str_len is required by SGLang, which stores it and reads it nowhere.
        return request_body(OpenSessionRequest(capacity_of_str_len=0, session_id=session, streaming=True))

    async def generate(
        self,
        input_ids: list[int],
        sampling_params: dict[str, Any],
        *,
        rid: str | None = None,
        lora: str | None = None,
        session: str | None = None,
        routed_experts: bool = False,
        image_data: list[str] | None = None,
    ) -> Generation:
        """Generate from the whole prompt `input_ids`. A streaming-session call that the engine
        refuses, or answers for another prompt, is sent again plain. `routed_experts`: ask for the
        tokens' routed experts (SGLang's `return_routed_experts`; a mixture-of-experts model only).
        `image_data`: the prompt's images as data URLs, one per image placeholder run, in order."""
        call = await self._opened(self.route(input_ids, rid, _session(self, session, image_data)), input_ids)
        again = {"rid": rid, "lora": lora, "routed_experts": routed_experts, "image_data": image_data}
        try:
            payload = self.generate_payload(
                call, sampling_params, stream=False, lora=lora, routed_experts=routed_experts, image_data=image_data
            )
            generation = parse_generation(await self._request("POST", "/generate", payload))
        except (EngineRejected, EngineProtocolError):
            if call.session is None:
                raise
            self._streaming.failed(call)
            return await self.generate(input_ids, sampling_params, **again)
        except BaseException:
            self._streaming.failed(call)
            raise
        if self._settled(call, input_ids, generation.output_ids, generation.prompt_tokens, generation.finish_reason):
            return generation
        return await self.generate(input_ids, sampling_params, **again)

    async def generate_stream(
        self,
        input_ids: list[int],
        sampling_params: dict[str, Any],
        *,
        rid: str | None = None,
        lora: str | None = None,
        session: str | None = None,
        routed_experts: bool = False,
        image_data: list[str] | None = None,
    ) -> AsyncIterator[GenerationDelta]:
        """Stream a generation. SGLang sends incremental `output_ids` per chunk and
        cumulative `output_token_logprobs`; this yields the new ids with their logprobs. A
        streaming-session call that the engine refuses, or answers for another prompt, is sent
        again plain before anything is yielded. `routed_experts`, `image_data`: as `generate`'s."""
        call = await self._opened(self.route(input_ids, rid, _session(self, session, image_data)), input_ids)
        chunks = self._chunks(call, sampling_params, lora, routed_experts, image_data)
        try:
            first = await self._first_chunk(call, input_ids, chunks)
        except _SendWhole:
            async for delta in self.generate_stream(
                input_ids, sampling_params, rid=rid, lora=lora, routed_experts=routed_experts, image_data=image_data
            ):
                yield delta
            return
        if first is None:
            return
        (delta, prompt_tokens), output_ids, finish = first, [], None
        try:
            while True:
                output_ids += delta.output_ids
                finish = delta.finish_reason or finish
                yield delta
                following = await anext(chunks, None)
                if following is None:
                    break
                delta = following[0]
        except BaseException:
            self._streaming.failed(call)
            raise
        self._settled(call, input_ids, output_ids, prompt_tokens, finish or {"type": "unknown"})

    async def _chunks(
        self,
        call: SessionCall,
        sampling_params: dict[str, Any],
        lora: str | None,
        routed_experts: bool = False,
        image_data: list[str] | None = None,
    ) -> AsyncIterator[tuple[GenerationDelta, int]]:
        """The stream's deltas, each with the prompt length the engine reports."""
        payload = self.generate_payload(
            call, sampling_params, stream=True, lora=lora, routed_experts=routed_experts, image_data=image_data
        )
        seen = 0
        async for chunk in self._stream("/generate", payload):
            answer = _answer(chunk, "stream chunk")
            delta = _stream_delta(answer, seen)
            seen += len(delta.output_ids)
            yield delta, answer.meta_info.prompt_tokens

    async def _first_chunk(
        self, call: SessionCall, input_ids: list[int], chunks: AsyncIterator[tuple[GenerationDelta, int]]
    ) -> tuple[GenerationDelta, int] | None:
        """The stream's first delta and prompt length. A session call raises `_SendWhole` when
        the engine refused it (SGLang says so in an error chunk) or ran another prompt."""
        try:
            first = await anext(chunks, None)
        except (EngineRejected, EngineProtocolError):
            if call.session is None:
                raise
            self._streaming.failed(call)
            raise _SendWhole from None
        except BaseException:
            self._streaming.failed(call)
            raise
        if call.session is not None and (first is None or first[1] != len(input_ids)):
            await chunks.aclose()  # hang up: the engine stops the request
            self._streaming.failed(call)
            raise _SendWhole
        return first

    async def _opened(self, call: SessionCall, input_ids: list[int]) -> SessionCall:
        """`call`, its session opened first where it is new; the plain call of the whole prompt
        when the engine will not open it (an SGLang without streaming sessions, an id in use)."""
        if not call.opens or call.session is None:
            return call
        try:
            await self._request("POST", "/open_session", self.open_session_payload(call.session))
        except (EngineRejected, EngineProtocolError) as exc:
            self._streaming.failed(call)
            log.warning(
                "%s did not open streaming session %s (%s): its calls go with their whole prompt; "
                "launch SGLang with --enable-streaming-session, or turn the gateway's sglang_sessions off",
                self.base_url,
                call.session,
                exc,
            )
            return SessionCall(list(input_ids), call.rid)
        except BaseException:
            self._streaming.failed(call)
            raise
        self._streaming.opened(call)
        return call

    def _settled(
        self,
        call: SessionCall,
        input_ids: list[int],
        output_ids: list[int],
        prompt_tokens: int,
        finish_reason: dict[str, Any],
    ) -> bool:
        """Tell the session how `call` ended; False when the engine ran another prompt than
        `input_ids` (the answer must not be used)."""
        if call.session is not None and finish_reason.get("type") == "abort":
            self._streaming.failed(call)
            return prompt_tokens == len(input_ids)
        return self._streaming.finished(call, input_ids, output_ids, prompt_tokens)

    async def model_info(self) -> dict[str, Any]:
        return await self._request("GET", "/get_model_info")

    async def close_session(self, session: str) -> None:
        """End `session` on the engine (SGLang's `CloseSessionReqInput`): what it kept is freed."""
        if self.sessions is SessionMode.NAMED or (
            self.sessions is SessionMode.STREAMING and self._streaming.forget(session)
        ):
            await self._request("POST", "/close_session", request_body(CloseSessionRequest(session_id=session)))

    async def server_info(self) -> dict[str, Any]:
        """SGLang's `/get_server_info`: its server arguments and scheduler state."""
        return await self._request("GET", "/get_server_info")

    async def capacity(self) -> EngineCapacity:
        """Its KV pool in tokens and the requests it runs at once, as `/get_server_info` reports them."""
        return sglang_capacity(await self.server_info())

    async def update_weights_from_disk(
        self, model_path: str, *, weight_version: str | None = None
    ) -> UpdateWeightsAnswer:
        request = UpdateWeightsRequest(model_path=model_path, weight_version=weight_version)
        answer = await self._request("POST", "/update_weights_from_disk", request_body(request))
        try:
            return UpdateWeightsAnswer.model_validate(answer)
        except ValidationError as exc:
            raise EngineProtocolError(f"not an SGLang /update_weights_from_disk answer: {str(answer)[:200]}") from exc

    async def abort(self, rid: str) -> Any:
        """Stop a running or waiting request (SGLang's `/abort_request`)."""
        return await self._request("POST", "/abort_request", request_body(AbortRequest(rid=rid)))

    async def flush_cache(self) -> Any:
        return await self._request("POST", "/flush_cache")

    async def load_lora_adapter(self, name: str, path: str, *, replace: bool = False) -> Any:
        """Serve the PEFT adapter folder `path` (on the engine's machine) under `name` (SGLang's
        route, which roost's engine serves too); `replace`: in place of a loaded adapter of that
        name (roost's engine and vLLM; SGLang has no such field)."""
        request = LoadLoraRequest(lora_name=name, lora_path=path, load_inplace=replace)
        return await self._request("POST", "/load_lora_adapter", request_body(request))

    async def update_weight_version(self, version: str) -> Any:
        """The version later calls report (SGLang's route, which roost's engine serves too)."""
        return await self._request(
            "POST", "/update_weight_version", request_body(UpdateWeightVersionRequest(new_version=version))
        )

    async def unload_lora_adapter(self, name: str) -> Any:
        return await self._request("POST", "/unload_lora_adapter", request_body(UnloadLoraRequest(lora_name=name)))

    async def pause_generation(self) -> Any:
        return await self._request("POST", "/pause_generation", request_body(PauseRequest()))

    async def continue_generation(self) -> Any:
        return await self._request("POST", "/continue_generation", {})


def _session(client: SGLangClient, session: str | None, image_data: list[str] | None) -> str | None:
    """The session a call goes in: a call with images goes plain past SGLang's streaming sessions,
    which send only a call's new tokens and so could not tell the engine which images it holds."""
    return None if image_data and client.sessions is SessionMode.STREAMING else session


def _decode_json(raw: bytes, url: str) -> Any:
    if not raw.strip():
        return {}
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        # /health and /flush_cache may answer plain text in SGLang.
        return {"text": raw.decode(errors="replace")}


def _error_message(raw: bytes) -> str:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode(errors="replace")[:500]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            return str(err.get("message", err))
        return str(err or body.get("message") or body.get("detail") or body)[:500]
    return str(body)[:500]


def _raise_for_status(status: int, raw: bytes, url: str) -> None:
    if status < 400:
        return
    message = f"{url} answered {status}: {_error_message(raw)}"
    if status >= 500 or status == 429:
        raise EngineUnavailable(message, status)
    raise EngineRejected(message, status)


def _sse_data(line: bytes) -> dict[str, Any] | None:
    line = line.strip()
    if not line.startswith(b"data:"):
        return None
    data = line[5:].strip()
    if data == b"[DONE]":
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise EngineProtocolError(f"undecodable stream chunk: {data[:200]!r}") from exc


def _stream_delta(answer: GenerateAnswer, seen: int) -> GenerationDelta:
    ids, meta = answer.output_ids, answer.meta_info
    # the logprobs are cumulative: only the new ones are read
    logprobs = _logprob_values((meta.output_token_logprobs or [])[seen : seen + len(ids)])
    if len(logprobs) != len(ids):
        raise EngineProtocolError(f"stream chunk has {len(ids)} ids but {len(logprobs)} new logprobs")
    return GenerationDelta(
        output_ids=ids,
        output_logprobs=logprobs,
        finish_reason=meta.finish_reason,
        weight_version=meta.weight_version,
        routed_experts=_routed_experts(meta.routed_experts, meta.prompt_tokens + seen + len(ids) - 1),
    )
