"""`roost bench gateway`: what the gateway adds on top of the engine.

The same chat load (a system prompt, several turns of a few hundred words, two tool
definitions; the scripted sampler answers with a tool call) is sent straight to the engine as
token ids (`/generate`) and through the gateway on one wire (`/v1/chat/completions`, or the
same conversation as Anthropic Messages on `/v1/messages`: `wire="messages"`, or as OpenAI
Responses items on `/v1/responses`: `wire="responses"`), at
each concurrency for a fixed time, with the same aiohttp client. Reported per
concurrency: throughput of both paths, latency percentiles, and the latency the gateway
adds. The engine's own latency varies by more than the gateway adds, so the added latency
is measured per request: the gateway reports its engine time in `Server-Timing`, and
`added_*_ms` are percentiles of (client latency - engine time) over gateway requests. The
plain difference of the two paths' medians is reported too, as `p50_diff_ms`.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from roost.rollout.gateway.preflight import TOOLS

REPLY = '<tool_call>\n{"name": "search", "arguments": {"q": "roost gateway"}}\n</tool_call>'
MAX_TOKENS = 64
_WORDS = (
    "the agent reads the observation carefully and decides which tool to call next while keeping "
    "track of what it has already tried and what the environment said in reply "
).split()


def _text(n_words: int, seed: int) -> str:
    return " ".join(_WORDS[(i * 7 + seed) % len(_WORDS)] for i in range(n_words))


def bench_messages(turns: int = 3, words: int = 250) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful agent. " + _text(120, 0)}]
    for t in range(turns):
        messages.append({"role": "user", "content": _text(words, t + 1)})
        messages.append({"role": "assistant", "content": _text(words // 3, t + 11)})
    messages.append({"role": "user", "content": _text(words, 99)})
    return messages


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


Sender = Callable[[aiohttp.ClientSession], Awaitable[tuple[bool, float | None]]]


async def _drive(send: Sender, concurrency: int, seconds: float) -> tuple[float, list[float], int, list[float]]:
    """Keep `concurrency` requests going for `seconds`, then let those in flight finish."""
    latencies: list[float] = []
    added: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=concurrency + 8)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=900)) as http:
        await send(http)  # warm the connection and the gateway's caches
        stop_at = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                ok, engine_s = await send(http)
                latency = time.perf_counter() - t0
                latencies.append(latency)
                errors += not ok
                if engine_s is not None:
                    added.append(latency - engine_s)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return len(latencies) / elapsed, latencies, errors, added


def _direct_sender(engine_url: str, input_ids: list[int]):
    body = orjson.dumps(
        {
            "input_ids": input_ids,
            "return_logprob": True,
            "sampling_params": {"max_new_tokens": MAX_TOKENS, "custom_params": {"scripted_reply": REPLY}},
        }
    )

    async def send(http: aiohttp.ClientSession) -> tuple[bool, None]:
        async with http.post(f"{engine_url}/generate", data=body, headers={"content-type": "application/json"}) as r:
            await r.read()
            return r.status == 200, None

    return send


WIRES = ("chat", "messages", "responses")


def _wire_request(wire: str, model: str, messages: list[dict[str, Any]]) -> tuple[str, dict[str, Any], bytes]:
    """The path, body and answer marker of the load on `wire` (the same prompt on each)."""
    scripted = {"custom_params": {"scripted_reply": REPLY}, "max_tokens": MAX_TOKENS, "model": model}
    if wire == "chat":
        return "/v1/chat/completions", {"messages": messages, "tools": TOOLS, **scripted}, b'"tool_calls"'
    if wire == "messages":
        tools = [
            {
                "name": t["function"]["name"],
                "description": t["function"]["description"],
                "input_schema": t["function"]["parameters"],
            }
            for t in TOOLS
        ]
        body = {"system": messages[0]["content"], "messages": messages[1:], "tools": tools, **scripted}
        return "/v1/messages", body, b'"tool_use"'
    if wire == "responses":
        tools = [{"type": "function", **t["function"]} for t in TOOLS]
        body = {
            "instructions": messages[0]["content"],
            "input": messages[1:],
            "tools": tools,
            "max_output_tokens": MAX_TOKENS,
            "model": model,
            "custom_params": scripted["custom_params"],
        }
        return "/v1/responses", body, b'"function_call"'
    raise ValueError(f"unknown wire {wire!r}; choose one of {', '.join(WIRES)}")


def _gateway_sender(
    gateway_url: str,
    model: str,
    messages: list[dict[str, Any]],
    wire: str,
    sessions: list[dict[str, Any]] | None = None,
):
    """Calls on plain `/v1` (the anonymous session), or spread over `sessions` in turn (each by
    its base_url and key: with several gateway workers, each session's calls go to its own)."""
    path, request, marker = _wire_request(wire, model, messages)
    body = orjson.dumps(request)
    plain = [(f"{gateway_url}{path}", {"content-type": "application/json"})]
    targets = itertools.cycle(
        [
            (
                s["base_url"].removesuffix("/v1") + path,
                {"content-type": "application/json", "authorization": f"Bearer {s['key']}"},
            )
            for s in sessions
        ]
        if sessions
        else plain
    )

    async def send(http: aiohttp.ClientSession) -> tuple[bool, float | None]:
        url, headers = next(targets)
        async with http.post(url, data=body, headers=headers) as r:
            raw = await r.read()
            timing = r.headers.get("Server-Timing", "")
            engine_s = float(timing.split("dur=", 1)[1]) / 1e3 if "dur=" in timing else None
            return r.status == 200 and marker in raw, engine_s

    return send


def _row(wire: str, concurrency: int, direct: tuple, gateway: tuple) -> dict[str, Any]:
    d_rps, d_lat, d_err, _ = direct
    g_rps, g_lat, g_err, added = gateway
    ms = 1e3
    return {
        "wire": wire,
        "concurrency": concurrency,
        "direct_rps": round(d_rps, 2),
        "gateway_rps": round(g_rps, 2),
        "added_p50_ms": round(_percentile(added, 0.5) * ms, 3),
        "added_p99_ms": round(_percentile(added, 0.99) * ms, 3),
        "added_mean_ms": round(statistics.fmean(added) * ms, 3) if added else None,
        "direct_p50_ms": round(_percentile(d_lat, 0.5) * ms, 3),
        "gateway_p50_ms": round(_percentile(g_lat, 0.5) * ms, 3),
        "p50_diff_ms": round((_percentile(g_lat, 0.5) - _percentile(d_lat, 0.5)) * ms, 3),
        "requests": len(g_lat),
        "errors": g_err,
        "direct_errors": d_err,
        "load_avg_1m": round(os.getloadavg()[0], 2),  # this machine's load: other work skews latency
    }


async def _run_levels(
    engine_url: str,
    gateway_url: str,
    input_ids: list[int],
    messages: list[dict[str, Any]],
    levels: list[int],
    seconds: float,
    wire: str,
    sessions: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    direct = _direct_sender(engine_url, input_ids)
    via_gateway = _gateway_sender(gateway_url, "tiny", messages, wire, sessions)
    rows = []
    for c in levels:
        # Interleave the two paths in halves so that a background load spike hits both.
        d1 = await _drive(direct, c, seconds / 2)
        g1 = await _drive(via_gateway, c, seconds / 2)
        d2 = await _drive(direct, c, seconds / 2)
        g2 = await _drive(via_gateway, c, seconds / 2)
        rows.append(_row(wire, c, _merge(d1, d2), _merge(g1, g2)))
    return rows


def _merge(a: tuple, b: tuple) -> tuple:
    return (a[0] + b[0]) / 2, a[1] + b[1], a[2] + b[2], a[3] + b[3]


def _prompt_ids(messages: list[dict[str, Any]]) -> list[int]:
    from transformers import AutoTokenizer

    from roost.rollout.engine.tiny_model import resolve_model

    hf = AutoTokenizer.from_pretrained(str(resolve_model("tiny")))
    text = hf.apply_chat_template(messages, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    return hf.backend_tokenizer.encode(text, add_special_tokens=False).ids


def run_bench(
    levels: list[int],
    *,
    seconds: float = 4.0,
    engine_url: str | None = None,
    wire: str = "chat",
    workers: list[int] | None = None,
    sessions: int = 64,
) -> list[dict[str, Any]]:
    """Without `workers`: one gateway process, calls on plain /v1. With `workers` (e.g. [1, 2]):
    a gateway of each many processes (`--workers`) in turn, the calls spread over `sessions`
    sessions; each row says `gateway_workers`."""
    from roost.rollout.engine.launch import EngineProcess

    if wire not in WIRES:
        raise ValueError(f"unknown wire {wire!r}; choose one of {', '.join(WIRES)}")
    from roost.rollout.gateway.launch import GatewayProcess

    messages = bench_messages()
    input_ids = _prompt_ids(messages)
    with tempfile.TemporaryDirectory() as tmp:
        engine = None
        if engine_url is None:
            engine = EngineProcess(scripted=True, extra_args=["--max-running", "256"])
            with _passive_openmp():
                engine_url = engine.start()
        try:
            rows = []
            for count in workers or [1]:
                store = Path(tmp) / f"bench-{count}.sqlite"
                args = ["--engine-url", engine_url, "--model", "tiny", "--store", str(store), "--workers", str(count)]
                gateway = GatewayProcess(args)
                with gateway as gateway_url:
                    opened = _open_sessions(gateway_url, gateway.admin_key, sessions) if workers else None
                    for row in _run(engine_url, gateway_url, input_ids, messages, levels, seconds, wire, opened):
                        rows.append({**row, "gateway_workers": count, "sessions": len(opened or [])})
            return rows
        finally:
            if engine is not None:
                engine.stop()


@contextmanager
def _passive_openmp():
    """Start the engine with idle OpenMP threads sleeping instead of spinning: on a small
    machine spinning threads take the cores the gateway and the client need, and the bench
    would measure that rather than the gateway."""
    before = os.environ.get("OMP_WAIT_POLICY")
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        yield
    finally:
        if before is None:
            del os.environ["OMP_WAIT_POLICY"]
        else:
            os.environ["OMP_WAIT_POLICY"] = before


def _open_sessions(gateway_url: str, admin_key: str, count: int) -> list[dict[str, Any]]:
    import httpx

    with httpx.Client(timeout=30, headers={"authorization": f"Bearer {admin_key}"}) as client:
        opened = [client.post(f"{gateway_url}/sessions", json={"group_id": "bench"}) for _ in range(count)]
    for answer in opened:
        answer.raise_for_status()
    return [answer.json() for answer in opened]


def _run(engine_url, gateway_url, input_ids, messages, levels, seconds, wire, sessions=None):
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    return runner(_run_levels(engine_url, gateway_url, input_ids, messages, levels, seconds, wire, sessions))
