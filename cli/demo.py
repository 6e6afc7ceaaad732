"""`roost demo`: roost's main job on its embedded defaults.

At this stage of the project the demo starts the embedded engine with the tiny model and
shows what it records for every call: sampled completions with their token ids and
logprobs, as the gateway and trainer will see them.
"""

from __future__ import annotations

import asyncio

import typer

PROMPTS = [
    "<|im_start|>user\nWhere is the apple?<|im_end|>\n<|im_start|>assistant\n",
    "The capital of France is",
    "def add(a, b):",
]


async def _sample(url: str) -> list[tuple[str, object]]:
    from roost.rollout.sglang_client import SGLangClient

    from transformers import AutoTokenizer

    async with SGLangClient(url) as client:
        info = await client.model_info()
        tokenizer = AutoTokenizer.from_pretrained(info["tokenizer_path"])
        params = {"max_new_tokens": 8, "temperature": 1.0, "sampling_seed": 0}
        ids = [tokenizer.encode(p, add_special_tokens=False) for p in PROMPTS]
        generations = await asyncio.gather(*(client.generate(i, params) for i in ids))
    return [(tokenizer, p, g) for p, g in zip(PROMPTS, generations)]


def demo() -> None:
    """Run roost's main job on the embedded defaults (tiny model, embedded engine)."""
    from rich.console import Console
    from rich.table import Table

    from roost.rollout.engine.launch import EngineProcess

    console = Console()
    with console.status("starting the embedded engine with the tiny model"):
        process = EngineProcess("tiny")
        url = process.start()
    try:
        results = asyncio.run(_sample(url))
    finally:
        process.stop()
    for tokenizer, prompt, gen in results:
        table = Table(title=f"prompt: {prompt!r}", show_lines=False)
        for column in ("token id", "token", "logprob"):
            table.add_column(column)
        for token, logprob in zip(gen.output_ids, gen.output_logprobs):
            table.add_row(str(token), repr(tokenizer.decode([token])), f"{logprob:.4f}")
        console.print(table)
        console.print(f"finish: {gen.finish_reason}  weight version: {gen.weight_version}\n")


def register(app: typer.Typer, bench: typer.Typer) -> None:
    app.command("demo")(demo)
