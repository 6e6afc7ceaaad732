"""Supervised fine-tuning with the RL trainer: the negative log-likelihood of assistant tokens.

    samples = sft_samples(recipe, renderer, transcripts)        # or read_jsonl / the store
    run_sft(trainer, samples, recipe.sft, on_step=...)          # trainer: rl.trainer.TrainerGroup

The data: expert transcripts rendered as the `tool` agent's chat (`sft.data`), `Sample`
records from a JSONL file, or the successful sessions of a trajectory store (rejection
sampling). Batches are drawn epoch by epoch in an order fixed by the seed, so a resumed
run continues with the same batches. The learning rate warms up linearly, then decays
on a cosine to `lr * min_lr_ratio`.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roost.agents.tool_agent import SYSTEM_PROMPT
from roost.rollout.store.samples import Sample

from ..advantages import Scored
from ..recipe import AgentConfig, SFTConfig, SFTData
from .data import ChatRenderer, RecordingAgent, Transcript, tool_agent_messages

if TYPE_CHECKING:
    from ..rl.trainer import TrainerGroup


def lr_at(step: int, config: SFTConfig) -> float:
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    span = max(1, config.steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    floor = config.min_lr_ratio
    return config.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def batch_indices(step: int, batch_size: int, n: int, seed: int) -> list[int]:
    """The sample indices of SFT step `step`: consecutive slices of per-epoch permutations."""
    out = []
    for position in range(step * batch_size, (step + 1) * batch_size):
        epoch, offset = divmod(position, n)
        order = list(range(n))
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
        out.append(order[offset])
    return out


def run_sft(
    trainer: TrainerGroup,
    samples: list[Sample],
    config: SFTConfig,
    *,
    seed: int = 0,
    start_step: int = 0,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
) -> None:
    """Train `config.steps` SFT steps (from `start_step`) with the trainer's policy."""
    from ..losses import LossConfig

    if not samples:
        raise ValueError("SFT has no samples; check sft.data (no successful expert episodes or records?)")
    trainer.set_loss(LossConfig(kind="sft"), lr_at(start_step, config))
    for step in range(start_step, config.steps):
        batch = [samples[i] for i in batch_indices(step, config.batch_size, len(samples), seed)]
        lr = lr_at(step, config)
        trainer.set_lr(lr)
        stats = trainer.train_step([Scored(s, [0.0] * len(s.tokens)) for s in batch])
        extra = stats.extra
        tokens = max(extra.get("tokens", 0.0), 1.0)
        flat = sum(len(s.tokens) for s in batch)
        metrics = {
            "loss": extra.get("neg_logprob", 0.0) / tokens,
            "lr": lr,
            "samples": len(batch),
            "sampled_tokens": stats.sampled_tokens,
            "grad_norm": stats.grad_norm,
            "tree_saving": 1 - stats.tree_tokens / flat,
            "seconds": stats.seconds,
            "train_tokens_per_s": stats.tree_tokens / max(stats.seconds, 1e-9),
        }
        if on_step is not None:
            on_step(step + 1, metrics)


async def play_transcripts(
    env_url: str, split: str, data: SFTData, *, max_turns: int, seed: int, concurrency: int = 8
) -> list[Transcript]:
    """Play the expert harness `data.episodes` times over the split's tasks (in turn)."""
    from roost.agents.registry import load_agent
    from roost.agents.runner import RunConfig, run_episodes
    from roost.envs.client import EnvClient
    from roost.outcome import EpisodeKind

    args = {**data.harness_args}
    if "seed" in _parameters(data.harness):
        args.setdefault("seed", seed)
    agent = RecordingAgent(load_agent(data.harness, **args))
    async with EnvClient(env_url) as env:
        tasks = await env.tasks(split)
        if not tasks:
            raise ValueError(f"split {split!r} has no tasks to play the expert on")
        chosen = [tasks[i % len(tasks)] for i in range(data.episodes)]
        await run_episodes(
            chosen,
            env,
            agent,
            (await env.info()).tools,
            RunConfig(
                concurrency=concurrency, max_turns=max_turns, run_id="sft-expert", kind=EpisodeKind.SFT, progress=False
            ),
        )
    return [t for t in agent.transcripts if t.success]


def _parameters(harness: str) -> set[str]:
    import importlib
    import inspect

    from roost.agents.registry import AGENTS

    module, _, attr = AGENTS.get(harness, harness).partition(":")
    try:
        return set(inspect.signature(getattr(importlib.import_module(module), attr)).parameters)
    except (ImportError, AttributeError, ValueError):
        return set()


def expert_transcripts(
    env_url: str, split: str, data: SFTData, *, max_turns: int, seed: int, cache: Path | None = None
) -> list[Transcript]:
    """The expert's successful transcripts, read from `cache` when it holds them."""
    if cache is not None and cache.is_file():
        return [
            Transcript(**{**r, "steps": [tuple(s) for s in r["steps"]]})
            for r in map(json.loads, cache.read_text().splitlines())
        ]
    transcripts = asyncio.run(play_transcripts(env_url, split, data, max_turns=max_turns, seed=seed))
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(asdict(t)) + "\n" for t in transcripts))
        tmp.replace(cache)
    return transcripts


def transcript_messages(transcript: Transcript, agent: AgentConfig) -> list[dict[str, Any]]:
    """The chat the recipe's `tool` agent would have had (its system prompt, tools or plain text)."""
    prompt = agent.args.get("system_prompt", SYSTEM_PROMPT)
    return tool_agent_messages(transcript, prompt, tools=agent.tools)


def render_transcripts(
    renderer: ChatRenderer, transcripts: list[Transcript], tools: list[dict[str, Any]], agent: AgentConfig
) -> list[Sample]:
    offered = tools if agent.tools else None
    # one group per task: a task's episodes share their prompt in the prefix tree
    return [
        renderer.sample(
            transcript_messages(t, agent),
            offered,
            session_id=f"expert-{i}",
            group_id=f"sft/{t.task_id}",
            reward=t.reward,
            untrained=t.untrained,
        )
        for i, t in enumerate(transcripts)
    ]


def recorded_samples(data: SFTData) -> list[Sample]:
    """SFT samples from a JSONL file of Sample records, or a store's well-rewarded sessions."""
    from ..sample_sources import read_jsonl, samples_from_store

    if not data.path:
        raise ValueError(f"sft.data.source {data.source!r} needs sft.data.path")
    if data.source == "jsonl":
        return read_jsonl(data.path)
    samples = [s for s in samples_from_store(data.path) if s.reward is not None and s.reward >= data.min_reward]
    return [replace(s, group_id="sft") for s in samples]
