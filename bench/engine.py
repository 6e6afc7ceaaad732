"""`roost bench engine`: decode throughput and time to first token of the rollout engines
(roost's embedded engine, vLLM) vs Hugging Face `generate`.

All run the same model in fp32 on the same prompts: each engine as a real server (requests
sent concurrently over HTTP through roost's own engine client, streamed so the first token
is timed), `generate` in-process on one padded batch. Each concurrency level is measured
greedy and at temperature 1 (RL rollouts sample at 1). vLLM serves only models whose
attention heads have 32 dimensions or more, so with it in the comparison the model is
`tiny-vllm` for every engine.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass

import torch

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.engine.tiny_model import resolve_model
from roost.rollout.engine_client import engine_client

# No graph compilation for vLLM: minutes of CPU at startup on a small machine.
VLLM_BENCH_ARGS = "--optimization-level 0"


@dataclass
class Measured:
    tok_s: float
    ttft_ms_p50: float


def _prompts(count: int, length: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(0)
    return torch.randint(1000, 100000, (count, length), generator=gen).tolist()


async def _engine_run(backend: str, url: str, api_key: str, prompts: list[list[int]], new_tokens: int,
                      temperature: float) -> Measured:
    params = {"max_new_tokens": new_tokens, "temperature": temperature, "ignore_eos": True}
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
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0,
                  do_sample=temperature > 0, **({"temperature": temperature, "top_k": 0} if temperature > 0 else {}))
    with torch.inference_mode():
        model.generate(ids[:1], **{**kwargs, "max_new_tokens": 2, "min_new_tokens": 2})  # warm-up
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
        elapsed = time.perf_counter() - start
    return (out.shape[1] - ids.shape[1]) * ids.shape[0] / elapsed


def _engine_process(backend: str, model: str, levels: list[int]) -> EngineProcess:
    if backend == "vllm":
        return EngineProcess(model, extra_args=["--backend", "vllm", "--max-running", str(max(levels)),
                                                "--vllm-args", VLLM_BENCH_ARGS], startup_timeout_s=900)
    return EngineProcess(model, extra_args=["--max-running", str(max(levels))])


def _engine_rows(backend: str, model: str, levels: list[int], new_tokens: int, prompt_tokens: int,
                 temperatures: tuple[float, ...]) -> list[dict]:
    rows = []
    with (process := _engine_process(backend, model, levels)) as url:
        for temperature in temperatures:
            for level in levels:
                measured = asyncio.run(_engine_run(backend, url, process.api_key, _prompts(level, prompt_tokens),
                                                   new_tokens, temperature))
                rows.append({"backend": backend, "model": model, "temperature": temperature, "concurrency": level,
                             "new_tokens": new_tokens, "prompt_tokens": prompt_tokens,
                             "engine_tok_s": round(measured.tok_s, 1), "ttft_ms_p50": round(measured.ttft_ms_p50, 1)})
    return rows


def run_bench(model: str | None, levels: list[int], new_tokens: int, prompt_tokens: int,
              temperatures: tuple[float, ...] = (0.0, 1.0), backends: tuple[str, ...] = ("embedded",),
              hf: bool = True) -> list[dict]:
    """One row per backend, temperature and concurrency level; with `hf`, each row also holds
    Hugging Face `generate`'s rate on the same batch."""
    model = model or ("tiny-vllm" if "vllm" in backends else "tiny")
    rows = [row for backend in backends
            for row in _engine_rows(backend, model, levels, new_tokens, prompt_tokens, temperatures)]
    if hf:
        _add_hf(rows, model, new_tokens, prompt_tokens)
    return rows


def _add_hf(rows: list[dict], model: str, new_tokens: int, prompt_tokens: int) -> None:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(resolve_model(model), dtype=torch.float32).eval()
    rates: dict[tuple[float, int], float] = {}
    for row in rows:
        key = (row["temperature"], row["concurrency"])
        if key not in rates:
            rates[key] = _hf_tok_s(hf, _prompts(key[1], prompt_tokens), new_tokens, key[0])
        row["hf_generate_tok_s"] = round(rates[key], 1)
        row["engine_vs_hf"] = round(row["engine_tok_s"] / rates[key], 2)
