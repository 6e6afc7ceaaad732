"""`roost bench engine`: decode throughput and time to first token of the rollout engines
(roost's embedded engine, vLLM) vs Hugging Face `generate`.

All run the same model in fp32 on the same prompts: each engine as a real server (requests
sent concurrently over HTTP through roost's own engine client, streamed so the first token
is timed), `generate` in-process on one padded batch. Each concurrency level is measured
greedy and at temperature 1 (RL rollouts sample at 1). vLLM serves only models whose
attention heads have 32 dimensions or more, so with it in the comparison the model is
`tiny-vllm` for every engine. With a constraint (`--constraint json`), each level of the
embedded engine is measured again with every request held to a grammar, and the row gives its
rate against the unconstrained one.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass

import torch

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.engine.tiny_model import resolve_model
from roost.rollout.engine_api.client import engine_client

# No graph compilation for vLLM: minutes of CPU at startup on a small machine.
VLLM_BENCH_ARGS = "--optimization-level 0"

# One free string that cannot close within the token limit (a string of at least 4,096 characters):
# constrained requests run as long as unconstrained ones and the two rates compare like for like.
# Without minLength the tiny model closed the string, and ended its reply, after 7 to 10 tokens in
# a third of the requests, and the rows left idle weighed on the constrained rate.
CONSTRAINTS = {
    "json": {
        "json_schema": json.dumps(
            {
                "type": "object",
                "properties": {"reply": {"type": "string", "minLength": 4096}},
                "required": ["reply"],
                "additionalProperties": False,
            }
        )
    },
}


@dataclass
class Measured:
    tok_s: float
    ttft_ms_p50: float


def _prompts(count: int, length: int, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(1000, 100000, (count, length), generator=gen).tolist()


async def _engine_run(
    backend: str,
    url: str,
    api_key: str,
    prompts: list[list[int]],
    new_tokens: int,
    temperature: float,
    constraint: dict | None = None,
) -> Measured:
    params = {"max_new_tokens": new_tokens, "temperature": temperature, "ignore_eos": True, **(constraint or {})}
    async with engine_client(backend, url, api_key=api_key, max_connections=len(prompts) + 4) as client:

        async def one(ids: list[int]) -> tuple[int, float]:
            sent, first, produced = time.perf_counter(), None, 0
            async for delta in client.generate_stream(ids, params):
                first = first or time.perf_counter()
                produced += len(delta.output_ids)
            return produced, (first or time.perf_counter()) - sent

        await one(prompts[0])  # warm-up
        start = time.perf_counter()
        results = await asyncio.gather(*(one(p) for p in prompts))
        elapsed = time.perf_counter() - start
    return Measured(sum(n for n, _ in results) / elapsed, statistics.median(t for _, t in results) * 1e3)


def _hf_tok_s(model, prompts: list[list[int]], new_tokens: int, temperature: float) -> float:
    ids = torch.tensor(prompts)
    kwargs = dict(
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        pad_token_id=0,
        do_sample=temperature > 0,
        **({"temperature": temperature, "top_k": 0} if temperature > 0 else {}),
    )
    with torch.inference_mode():
        model.generate(ids[:1], **{**kwargs, "max_new_tokens": 2, "min_new_tokens": 2})  # warm-up
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
        elapsed = time.perf_counter() - start
    return (out.shape[1] - ids.shape[1]) * ids.shape[0] / elapsed


def _engine_process(backend: str, model: str, levels: list[int]) -> EngineProcess:
    if backend == "vllm":
        return EngineProcess(
            model,
            extra_args=["--backend", "vllm", "--max-running", str(max(levels)), "--vllm-args", VLLM_BENCH_ARGS],
            startup_timeout_s=900,
        )
    return EngineProcess(model, extra_args=["--max-running", str(max(levels))])


def _engine_rows(
    backend: str,
    model: str,
    levels: list[int],
    new_tokens: int,
    prompt_tokens: int,
    temperatures: tuple[float, ...],
    constraint: str | None = None,
) -> list[dict]:
    rows = []
    with (process := _engine_process(backend, model, levels)) as url:

        def measure(level: int, temperature: float, held: str | None) -> Measured:
            # a constrained run gets other prompts: the engine keeps the first run's in its prefix cache
            prompts = _prompts(level, prompt_tokens, seed=1 if held else 0)
            return asyncio.run(
                _engine_run(
                    backend, url, process.api_key, prompts, new_tokens, temperature, CONSTRAINTS[held] if held else None
                )
            )

        for temperature in temperatures:
            for level in levels:
                measured = measure(level, temperature, None)
                row = {
                    "backend": backend,
                    "model": model,
                    "temperature": temperature,
                    "concurrency": level,
                    "new_tokens": new_tokens,
                    "prompt_tokens": prompt_tokens,
                    "engine_tok_s": round(measured.tok_s, 1),
                    "ttft_ms_p50": round(measured.ttft_ms_p50, 1),
                }
                rows.append(row)
                if constraint is not None and backend == "embedded":
                    held = measure(level, temperature, constraint)
                    rows.append(
                        {
                            **row,
                            "constraint": constraint,
                            "engine_tok_s": round(held.tok_s, 1),
                            "ttft_ms_p50": round(held.ttft_ms_p50, 1),
                            "vs_unconstrained": round(held.tok_s / measured.tok_s, 2),
                        }
                    )
    return rows


def run_bench(
    model: str | None,
    levels: list[int],
    new_tokens: int,
    prompt_tokens: int,
    temperatures: tuple[float, ...] = (0.0, 1.0),
    backends: tuple[str, ...] = ("embedded",),
    hf: bool = True,
    constraint: str | None = None,
) -> list[dict]:
    """One row per backend, temperature and concurrency level; with `hf`, each unconstrained row
    also holds Hugging Face `generate`'s rate on the same batch; with `constraint` (a key of
    CONSTRAINTS), a constrained row after each of the embedded engine's, with `vs_unconstrained`."""
    model = model or ("tiny-vllm" if "vllm" in backends else "tiny")
    rows = [
        row
        for backend in backends
        for row in _engine_rows(backend, model, levels, new_tokens, prompt_tokens, temperatures, constraint)
    ]
    if hf:
        _add_hf(rows, model, new_tokens, prompt_tokens)
    return rows


def _add_hf(rows: list[dict], model: str, new_tokens: int, prompt_tokens: int) -> None:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(resolve_model(model), dtype=torch.float32).eval()
    rates: dict[tuple[float, int], float] = {}
    for row in (r for r in rows if "constraint" not in r):
        key = (row["temperature"], row["concurrency"])
        if key not in rates:
            rates[key] = _hf_tok_s(hf, _prompts(key[1], prompt_tokens), new_tokens, key[0])
        row["hf_generate_tok_s"] = round(rates[key], 1)
        row["engine_vs_hf"] = round(row["engine_tok_s"] / rates[key], 2)
