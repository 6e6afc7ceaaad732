"""`roost bench prefix-tree`: a training step in the flat and the tree layout.

The model is the tiny model's architecture (Qwen3) made deep and wide enough that the
transformer body dominates: 8 layers, hidden 512. Both layouts compute the vocabulary
projection and logprobs only at sampled tokens. Each layout runs in its own child
process, so its peak memory (peak RSS over the steps, less the RSS after the model is
loaded) is its own. Cases:

- `grpo`: one GRPO group of 8 rollouts, a 1,024-token prompt, 128-token answers;
- `agentic`: one 8-turn session (256-token task, then 64 sampled + 64 observation tokens
  per turn) whose history branches 4 ways after turn 4 (4 root-to-leaf samples).

A step is forward, per-token logprobs, a policy-gradient loss and backward. The two
layouts' steps alternate, so load from elsewhere on the machine hits both alike; the
time reported is the fastest of `repeats` steps.

The vocabulary defaults to 4,096 tokens (the demo model's scale). With Qwen3's 151,936 the
projection for 1,024 sampled tokens costs more than this body on the 2,048 tree tokens,
and it is the same in both layouts, so it would hide what packing changes;
`--vocab-size 151936` measures that case too.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import random
import resource
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

BENCH_CONFIG = {
    "num_hidden_layers": 8,
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 64,
}


@dataclass
class CaseResult:
    case: str
    samples: int
    flat_tokens: int
    tree_tokens: int
    sampled_tokens: int
    ideal_speedup: float
    flat_step_s: float
    tree_step_s: float
    speedup: float
    flat_peak_mb: float
    tree_peak_mb: float
    max_abs_logprob_diff: float


def grpo_case(rng: random.Random, vocab: int, rollouts: int = 8, prompt: int = 1024, answer: int = 128):
    head = [rng.randrange(vocab) for _ in range(prompt)]
    return [
        (head + [rng.randrange(vocab) for _ in range(answer)], [0] * prompt + [1] * answer) for _ in range(rollouts)
    ]


def agentic_case(
    rng: random.Random,
    vocab: int,
    turns: int = 8,
    branches: int = 4,
    branch_after: int = 4,
    task: int = 256,
    sampled: int = 64,
    observation: int = 64,
):
    def turn() -> tuple[list[int], list[int]]:
        return ([rng.randrange(vocab) for _ in range(sampled + observation)], [1] * sampled + [0] * observation)

    trunk_tokens, trunk_mask = [rng.randrange(vocab) for _ in range(task)], [0] * task
    for _ in range(branch_after):
        tokens, mask = turn()
        trunk_tokens, trunk_mask = trunk_tokens + tokens, trunk_mask + mask
    out = []
    for _ in range(branches):
        tokens, mask = list(trunk_tokens), list(trunk_mask)
        for _ in range(turns - branch_after):
            more, more_mask = turn()
            tokens, mask = tokens + more, mask + more_mask
        out.append((tokens, mask))
    return out


CASES = {"grpo": grpo_case, "agentic": agentic_case}


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _release_free_heap() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def _layout_worker(checkpoint: str, case: str, layout: str, vocab: int, threads: int, seed: int, conn) -> None:
    """A child process serving one layout: 'step' runs and times a step, 'done' reports."""
    try:
        _serve_layout(checkpoint, case, layout, vocab, threads, seed, conn)
    except BaseException as exc:  # the parent reports it; a dead child must not hang it
        conn.send({"error": f"{type(exc).__name__}: {exc}"})


def _serve_layout(checkpoint: str, case: str, layout: str, vocab: int, threads: int, seed: int, conn) -> None:
    import torch

    torch.set_num_threads(threads)
    from roost.rollout.engine.model_spec import ModelSpec
    from roost.rollout.engine.rope import inverse_frequencies
    from roost.trainer import hf_checkpoint
    from roost.trainer.megatron import convert, parallel
    from roost.trainer.megatron.model import build_gpt_model, scored_logprobs, transformer_config
    from roost.trainer.prefix_tree import build_microbatches

    parallel.init(tp=1)
    spec = ModelSpec.from_folder(checkpoint)
    model = build_gpt_model(spec, transformer_config(spec), "sdpa")
    convert.load_into(model, convert.hf_to_megatron(hf_checkpoint.read_weights(checkpoint), spec))
    data = CASES[case](random.Random(seed), vocab)
    sequences = [tokens for tokens, _ in data]
    scored = [[i for i, m in enumerate(mask) if m] for _, mask in data]
    budget = max(sum(len(s) for s in sequences), 1)
    microbatches = build_microbatches(sequences, scored, ["group"] * len(data), budget, layout)
    inv_freq = inverse_frequencies(spec)

    def step() -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        per_sample: dict[int, torch.Tensor] = {}
        for mb in microbatches:
            logprobs = mb.sample_logprobs(scored_logprobs(model, mb, inv_freq))
            per_sample.update(zip(mb.sample_index, logprobs))
            sum(lp.sum() for lp in logprobs).backward()
        return [per_sample[i].detach() for i in range(len(data))]

    _release_free_heap()
    before = _rss_mb()
    conn.send({"ready": True})
    logprobs: list[torch.Tensor] = []
    while conn.recv() == "step":
        started = time.perf_counter()
        logprobs = step()
        conn.send({"step_s": time.perf_counter() - started})
    conn.send(
        {
            "tokens": sum(mb.num_tokens for mb in microbatches),
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before,
            "logprobs": [lp.tolist() for lp in logprobs],
            "sampled": sum(len(s) for s in scored),
        }
    )
    parallel.shutdown()


def bench_checkpoint(folder: Path, vocab: int, seed: int = 0) -> Path:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from roost.rollout.engine.tiny_model import TINY_CONFIG

    torch.manual_seed(seed)
    # a wider init than the default 0.02, so that logprobs are far from uniform and their
    # comparison across layouts means something
    config = Qwen3Config(**{**TINY_CONFIG, **BENCH_CONFIG, "vocab_size": vocab, "initializer_range": 0.1})
    Qwen3ForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    return folder


def _answer(conn, child) -> dict:
    while not conn.poll(1.0):
        if not child.is_alive():
            raise RuntimeError(f"benchmark child exited with code {child.exitcode} before answering")
    answer = conn.recv()
    if "error" in answer:
        raise RuntimeError(f"benchmark child failed: {answer['error']}")
    return answer


def run_case(checkpoint: Path, case: str, vocab: int, repeats: int = 2, threads: int = 2, seed: int = 0) -> CaseResult:
    """Both layouts in their own processes, their steps alternated so that load from
    elsewhere on the machine hits both alike; the fastest step of each counts."""
    ctx = mp.get_context("spawn")
    workers = {}
    for layout in ("flat", "tree"):
        ours, theirs = ctx.Pipe()
        child = ctx.Process(target=_layout_worker, args=(str(checkpoint), case, layout, vocab, threads, seed, theirs))
        child.start()
        workers[layout] = (ours, child)
    try:
        for conn, child in workers.values():
            _answer(conn, child)
        times: dict[str, list[float]] = {"flat": [], "tree": []}
        for _ in range(repeats):
            for layout, (conn, child) in workers.items():
                conn.send("step")
                times[layout].append(_answer(conn, child)["step_s"])
        runs = {}
        for layout, (conn, child) in workers.items():
            conn.send("done")
            runs[layout] = _answer(conn, child) | {"step_s": min(times[layout])}
            child.join()
    finally:
        for _, child in workers.values():
            if child.is_alive():
                child.terminate()
    flat, tree = runs["flat"], runs["tree"]
    diff = max(abs(a - b) for x, y in zip(flat["logprobs"], tree["logprobs"]) for a, b in zip(x, y))
    return CaseResult(
        case=case,
        samples=len(flat["logprobs"]),
        flat_tokens=flat["tokens"],
        tree_tokens=tree["tokens"],
        sampled_tokens=flat["sampled"],
        ideal_speedup=round(flat["tokens"] / tree["tokens"], 3),
        flat_step_s=round(flat["step_s"], 3),
        tree_step_s=round(tree["step_s"], 3),
        speedup=round(flat["step_s"] / tree["step_s"], 3),
        flat_peak_mb=round(flat["peak_mb"], 1),
        tree_peak_mb=round(tree["peak_mb"], 1),
        max_abs_logprob_diff=diff,
    )


def run_bench(cases: list[str], vocab: int = 4096, repeats: int = 2, threads: int = 2) -> list[dict]:
    """Run the cases; one result dict per case (the fields of `CaseResult`)."""
    for case in cases:
        if case not in CASES:
            raise ValueError(f"unknown case {case!r}; choose from {', '.join(CASES)}")
    root = Path(os.environ.get("ROOST_HOME", Path.home() / ".cache" / "roost")) / "models"
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        checkpoint = bench_checkpoint(Path(tmp) / "bench-qwen3", vocab)
        return [asdict(run_case(checkpoint, case, vocab, repeats, threads)) for case in cases]
