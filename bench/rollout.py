"""`roost bench rollout`: a multi-turn agent workload through the gateway and the embedded engine,
with program-awareness off and on.

N programs (sessions) of K turns each: every turn's prompt is the last one plus the reply and M
new words, a tool wait drawn uniformly from [0.5, 1.5] x `tool_s` between calls, a short scripted
reply. The programs run `concurrency` at a time. Off: the engine reuses free slots by recency and
the gateway admits every call. On: the engine keeps each session's cache between its calls
(`--kv-budget-tokens`) and the gateway admits sessions whole (`--admission-programs`, the
engine's slots), so a running program keeps its cache past the point where they thrash.
Reported per level and mode: episodes per minute, prompt tokens per second, the prefix-cache hit
rate and the prompt tokens prefilled (from the engine's `/metrics`); with `on`, also the tokens
evicted and prefilled again (the engine counts those only when it retains sessions).
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from roost.bench.gateway import _passive_openmp, _text

REPLY = "I will look at the next file."


@dataclass(frozen=True)
class RolloutBenchConfig:
    levels: tuple[int, ...] = (2, 4, 8)
    """Programs run at once."""
    programs: int = 16
    turns: int = 6
    words_per_turn: int = 120
    tool_s: float = 0.3
    slots: int = 4
    """The engine's slots (`--max-running`): the programs whose cache it can hold at once."""
    context_length: int = 4096
    modes: tuple[str, ...] = ("off", "on")
    seed: int = 0


def run_bench(config: RolloutBenchConfig, progress=None) -> dict[str, Any]:
    from roost.rollout.engine.launch import EngineProcess
    from roost.rollout.gateway.launch import GatewayProcess

    rows = []
    for mode in config.modes:
        engine_args = ["--max-running", str(config.slots), "--context-length", str(config.context_length)]
        gateway_args: list[str] = []
        if mode == "on":
            engine_args += ["--kv-budget-tokens", str(config.slots * config.context_length)]
            gateway_args += ["--admission-programs", str(config.slots)]
        with tempfile.TemporaryDirectory() as tmp, _passive_openmp():
            engine = EngineProcess(extra_args=engine_args)
            with engine as engine_url:
                store = Path(tmp) / "bench.sqlite"
                args = ["--engine-url", engine_url, "--model", "tiny", "--store", str(store), *gateway_args]
                gateway = GatewayProcess(args)
                with gateway as gateway_url:
                    for level in config.levels:
                        row = asyncio.run(_level(config, mode, level, engine_url, gateway_url, gateway.admin_key))
                        rows.append(row)
                        if progress is not None:
                            progress(" ".join(f"{k}={v}" for k, v in row.items()))
    return {"config": config.__dict__, "rows": rows}


async def _level(
    config: RolloutBenchConfig, mode: str, level: int, engine_url: str, gateway_url: str, admin_key: str
) -> dict[str, Any]:
    rng = random.Random(config.seed)
    waits = [[rng.uniform(0.5, 1.5) * config.tool_s for _ in range(config.turns)] for _ in range(config.programs)]
    before = {**await _engine_counts(engine_url), **await _gateway_counts(gateway_url)}
    queue: asyncio.Queue[int] = asyncio.Queue()
    for program in range(config.programs):
        queue.put_nowait(program)
    async with httpx.AsyncClient(timeout=600, headers={"authorization": f"Bearer {admin_key}"}) as http:
        started = time.perf_counter()

        async def runner() -> None:
            while not queue.empty():
                program = queue.get_nowait()
                await _program(http, gateway_url, config, level, program, waits[program])

        await asyncio.gather(*(runner() for _ in range(level)))
        elapsed = time.perf_counter() - started
    after = {**await _engine_counts(engine_url), **await _gateway_counts(gateway_url)}
    d = {k: after[k] - before[k] for k in after}
    return {
        "mode": mode,
        "concurrency": level,
        "programs": config.programs,
        "turns": config.turns,
        "slots": config.slots,
        "episodes_per_min": round(config.programs / elapsed * 60, 2),
        "prompt_tokens_per_s": round(d["prompt"] / elapsed, 1),
        "prefix_hit_rate": round(d["cached"] / d["prompt"], 3) if d["prompt"] else None,
        "prefilled_tokens": int(d["prompt"] - d["cached"]),
        "evicted_tokens": int(d["evicted"]),
        "reprefilled_tokens": int(d["reprefilled"]),
        "deferred_programs": int(d["deferred"]),
        "let_through_programs": int(d["let_through"]),
        "seconds": round(elapsed, 2),
    }


async def _program(
    http: httpx.AsyncClient, gateway_url: str, config: RolloutBenchConfig, level: int, program: int, waits: list[float]
) -> None:
    created = await http.post(f"{gateway_url}/sessions", json={"group_id": f"bench-{level}-{program}"})
    created.raise_for_status()
    session = created.json()
    headers = {"authorization": f"Bearer {session['key']}"}
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful agent. " + _text(60, program)}]
    for turn in range(config.turns):
        messages.append({"role": "user", "content": _text(config.words_per_turn, program * 31 + turn)})
        body = {
            "model": "tiny",
            "messages": messages,
            "max_tokens": 16,
            "custom_params": {"scripted_reply": REPLY},
        }
        answer = await http.post(f"{session['base_url']}/chat/completions", json=body, headers=headers)
        answer.raise_for_status()
        messages.append(answer.json()["choices"][0]["message"])
        await asyncio.sleep(waits[turn])  # the tool runs
    finished = await http.post(f"{gateway_url}/sessions/{session['session_id']}/finish", json={})
    finished.raise_for_status()


async def _samples(url: str) -> dict[tuple[str, str], float]:
    from prometheus_client.parser import text_string_to_metric_families

    async with httpx.AsyncClient(timeout=30) as http:
        text = (await http.get(f"{url}/metrics")).text
    return {
        (s.name, s.labels.get("outcome", "")): s.value for f in text_string_to_metric_families(text) for s in f.samples
    }


async def _gateway_counts(gateway_url: str) -> dict[str, float]:
    values = await _samples(gateway_url)
    name = "roost_gateway_admissions_total"
    return {"deferred": values.get((name, "deferred"), 0.0), "let_through": values.get((name, "let_through"), 0.0)}


async def _engine_counts(engine_url: str) -> dict[str, float]:
    values = {name: value for (name, _), value in (await _samples(engine_url)).items()}
    return {
        "prompt": values.get("roost_engine_prompt_tokens_total", 0.0),
        "cached": values.get("roost_engine_cached_tokens_total", 0.0),
        "evicted": values.get("roost_engine_kv_evicted_tokens_total", 0.0),
        "reprefilled": values.get("roost_engine_kv_reprefilled_tokens_total", 0.0),
    }
