"""`roost bench engine`: decode throughput of the engine vs Hugging Face `generate`.

Both run the same model in fp32 on the same prompts: the engine as a real server
(requests sent concurrently over HTTP), `generate` in-process on one padded batch. Each
concurrency level is measured greedy and at temperature 1 (RL rollouts sample at 1).
With a constraint (`--constraint json`), each level is measured again with every request held
to a grammar, and the row gives its rate against the unconstrained one.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import torch

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.engine.tiny_model import resolve_model


# One free string: a model keeps writing it up to the token limit, so constrained requests run
# as long as unconstrained ones and the two rates compare like for like.
CONSTRAINTS = {
    "json": {"json_schema": json.dumps({"type": "object", "properties": {"reply": {"type": "string"}},
                                        "required": ["reply"], "additionalProperties": False})},
}


def _prompts(count: int, length: int, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(1000, 100000, (count, length), generator=gen).tolist()


async def _engine_tok_s(url: str, prompts: list[list[int]], new_tokens: int, temperature: float,
                        constraint: dict | None = None) -> float:
    params = {"max_new_tokens": new_tokens, "temperature": temperature, "ignore_eos": True, **(constraint or {})}
    limits = httpx.Limits(max_connections=len(prompts) + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        async def one(ids: list[int]) -> int:
            resp = await client.post(f"{url}/generate", json={"input_ids": ids, "sampling_params": params})
            resp.raise_for_status()
            return len(resp.json()["output_ids"])

        await one(prompts[0])  # warm-up
        start = time.perf_counter()
        produced = sum(await asyncio.gather(*(one(p) for p in prompts)))
        return produced / (time.perf_counter() - start)


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


def run_bench(model: str, levels: list[int], new_tokens: int, prompt_tokens: int,
              temperatures: tuple[float, ...] = (0.0, 1.0), constraint: str | None = None) -> list[dict]:
    """One row per temperature and level; with `constraint` (a key of CONSTRAINTS), a second row
    for each, constrained, with `vs_unconstrained` (its rate over the first's) and no HF column."""
    from transformers import AutoModelForCausalLM

    folder = resolve_model(model)
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    rows, constrained = [], []
    with EngineProcess(model, extra_args=["--max-running", str(max(levels))]) as url:
        for temperature in temperatures:
            for level in levels:
                prompts = _prompts(level, prompt_tokens)
                engine = asyncio.run(_engine_tok_s(url, prompts, new_tokens, temperature))
                row = {"temperature": temperature, "concurrency": level, "new_tokens": new_tokens,
                       "prompt_tokens": prompt_tokens, "engine_tok_s": round(engine, 1)}
                rows.append(row)
                if constraint is not None:
                    # other prompts: the engine keeps the first run's in its prefix cache
                    fresh = _prompts(level, prompt_tokens, seed=1)
                    held = asyncio.run(_engine_tok_s(url, fresh, new_tokens, temperature, CONSTRAINTS[constraint]))
                    constrained.append({**row, "constraint": constraint, "engine_tok_s": round(held, 1),
                                        "vs_unconstrained": round(held / engine, 2)})
    for row in rows:
        hf_rate = _hf_tok_s(hf, _prompts(row["concurrency"], prompt_tokens), new_tokens, row["temperature"])
        row["hf_generate_tok_s"] = round(hf_rate, 1)
        row["engine_vs_hf"] = round(row["engine_tok_s"] / hf_rate, 2)
    return rows + constrained
