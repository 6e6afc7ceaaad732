"""`roost bench tinker`: the Tinker API served by `roost tinker serve`, driven by the pinned SDK.

Starts the server on the base model, then for each number of concurrent clients (each its own
`ServiceClient` and training client) runs `steps` steps in lock-step: every client sends one
`forward_backward` of `batch` random sequences of `seq_len` tokens, all are awaited, then every
client's `optim_step`. Reports `forward_backward` tokens/s (all clients' tokens over the phases'
wall time) and the median `optim_step` phase in seconds; then the seconds and bytes of one
`save_weights_for_sampler`, the weight sync of the Tinker path (bytes: what the save wrote to the
server's weights folder, which lives in the TMPDIR the bench gives it). Both modes, each on a
server of its own: `lora` (the SDK's LoRA clients train adapters, the server's default) and
`full_weight` (`roost tinker serve --full-weight`: every weight trains).
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from roost.lifetime import stop_process
from roost.serving.process import start_reporting

API_KEY = "tml-roost-bench-key"


@dataclass(frozen=True)
class TinkerBenchConfig:
    base_model: str = "tiny"
    concurrency: tuple[int, ...] = (1, 4)
    steps: int = 3
    batch: int = 4
    seq_len: int = 128
    rank: int = 8


def _folder_bytes(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())


def _datum(rng: random.Random, seq_len: int, vocab: int):
    import tinker

    tokens = [rng.randrange(vocab) for _ in range(seq_len + 1)]
    return tinker.types.Datum(
        model_input=tinker.types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * seq_len},
    )


async def _measure_level(
    url: str, config: TinkerBenchConfig, clients: int, vocab: int, weights_tmp: Path | None
) -> dict[str, Any]:
    """One concurrency level; with `weights_tmp`, also a sampler save of the first client's weights."""
    import tinker

    services = [tinker.ServiceClient(base_url=url, api_key=API_KEY) for _ in range(clients)]
    try:
        trainers = await asyncio.gather(
            *(s.create_lora_training_client(base_model=config.base_model, rank=config.rank) for s in services)
        )
        rng = random.Random(0)
        data = [[_datum(rng, config.seq_len, vocab) for _ in range(config.batch)] for _ in trainers]
        adam = tinker.types.AdamParams(learning_rate=1e-4)
        fwd_bwd_s, optim_s = [], []
        for _ in range(config.steps):
            start = time.perf_counter()
            await asyncio.gather(*(t.forward_backward(d, "cross_entropy") for t, d in zip(trainers, data)))
            fwd_bwd_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            await asyncio.gather(*(t.optim_step(adam) for t in trainers))
            optim_s.append(time.perf_counter() - start)
        tokens = clients * config.steps * config.batch * config.seq_len
        row: dict[str, Any] = {
            "clients": clients,
            "forward_backward_tokens_per_s": round(tokens / sum(fwd_bwd_s), 1),
            "optim_step_s_median": round(statistics.median(optim_s), 4),
        }
        if weights_tmp is not None:
            row["sampler_save"] = await _measure_save(trainers[0], weights_tmp)
        return row
    finally:
        for service in services:
            await service.close("success")


async def _measure_save(trainer, weights_tmp: Path) -> dict[str, Any]:
    before = _folder_bytes(weights_tmp)
    start = time.perf_counter()
    await trainer.save_weights_for_sampler("bench")
    seconds = time.perf_counter() - start
    return {"seconds": round(seconds, 3), "bytes": _folder_bytes(weights_tmp) - before}


async def _run(url: str, config: TinkerBenchConfig, weights_tmp: Path, mode: str) -> dict[str, Any] | str:
    async with httpx.AsyncClient(headers={"X-Api-Key": API_KEY}) as http:
        response = await http.get(f"{url}/api/v1/get_server_capabilities")
        response.raise_for_status()
        capabilities = response.json()
    if not capabilities.get(mode):
        return f"not served: the server's capabilities say {mode}: {capabilities.get(mode)}"
    vocab = await _vocab_size(url, config)
    rows = [
        await _measure_level(url, config, clients, vocab, weights_tmp if i == 0 else None)
        for i, clients in enumerate(config.concurrency)
    ]
    return {
        "rows": [{k: v for k, v in row.items() if k != "sampler_save"} for row in rows],
        "sampler_save": rows[0]["sampler_save"],
    }


async def _vocab_size(url: str, config: TinkerBenchConfig) -> int:
    import tinker

    service = tinker.ServiceClient(base_url=url, api_key=API_KEY)
    try:
        trainer = await service.create_lora_training_client(base_model=config.base_model, rank=config.rank)
        return len(trainer.get_tokenizer())
    finally:
        await service.close("success")


def run_bench(config: TinkerBenchConfig) -> dict[str, Any]:
    """Measure LoRA clients (the server's default) and full-weight ones (`--full-weight`), each on
    a server of its own; the JSON report."""
    return {
        "base_model": config.base_model,
        "steps": config.steps,
        "batch": config.batch,
        "seq_len": config.seq_len,
        "rank": config.rank,
        "lora": _serve_and_measure(config, "lora", []),
        "full_weight": _serve_and_measure(config, "full_weight", ["--full-weight"]),
    }


def _serve_and_measure(config: TinkerBenchConfig, mode: str, flags: list[str]) -> dict[str, Any] | str:
    """Start `roost tinker serve` on the base model with `flags`, measure, stop it."""
    with tempfile.TemporaryDirectory(prefix="roost-bench-tinker-") as folder:
        root = Path(folder)
        weights_tmp = root / "tmp"
        weights_tmp.mkdir()
        command = [sys.executable, "-m", "roost.cli.main", "tinker", "serve", "--base-model", config.base_model, *flags]
        with (root / "server.log").open("w") as log:
            process, port = start_reporting(
                [
                    *command,
                    "--port",
                    "0",
                    "--port-file",
                    str(root / "port"),
                    "--store",
                    str(root / "trajectories.sqlite"),
                ],
                root / "port",
                "roost tinker serve",
                180.0,
                see=" (its log is removed with the bench's folder)",
                env={**os.environ, "ROOST_TINKER_KEY": API_KEY, "TMPDIR": str(weights_tmp)},
                stdout=log,
                stderr=log,
            )
            try:
                return asyncio.run(_run(f"http://127.0.0.1:{port}", config, weights_tmp, mode))
            finally:
                stop_process(process)
