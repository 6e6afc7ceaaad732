"""`roost bench prefix-tree`: a training step in the flat and the tree layout.

The model is the tiny model's architecture (Qwen3) made deep and wide enough that the
transformer body dominates: 8 layers, hidden 512. Both layouts compute the vocabulary
projection and logprobs only at sampled tokens. Each layout runs in its own child
process, so its peak memory (peak RSS over the steps, less the RSS after the model is
loaded) is its own. Cases:

- `grpo`: one GRPO group of 8 rollouts, a 1,024-token prompt, 128-token answers;
- `agentic`: one 8-turn session (256-token task, then 64 sampled + 64 observation tokens
  per turn) whose history branches 4 ways after turn 4 (4 root-to-leaf samples);
- `vision` (`--vision`): one GRPO group of 8 rollouts sharing a screenshot prompt on a
  Qwen3-VL model (the same language model under a 4-block vision tower, frozen as the trainer
  keeps it): a 512x512 screenshot (256 image tokens after the 2x2 merge) and 766 text tokens,
  then 128-token answers. Each layout encodes the image once per microbatch; the tree also
  runs the image's tokens through the language model once instead of 8 times.

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


# The vision case's tower: Qwen3-VL's layout (16-pixel patches, 2x2 merge, two-frame temporal
# patches, deepstack), small enough for a CPU; its output feeds the language model's width.
BENCH_VISION = {
    "depth": 4,
    "hidden_size": 256,
    "num_heads": 4,
    "intermediate_size": 768,
    "hidden_act": "gelu_pytorch_tanh",
    "in_channels": 3,
    "patch_size": 16,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
    "out_hidden_size": BENCH_CONFIG["hidden_size"],
    "num_position_embeddings": 2304,
    "deepstack_visual_indexes": [1],
}
SCREENSHOT_GRID = (1, 32, 32)
"""A 512x512 screenshot in 16-pixel patches: 1,024 patches, 256 image tokens after the merge."""


@dataclass(frozen=True)
class VisionInputs:
    """What packing needs besides the ids: per-token keys (image tokens by image and index),
    3-D rope positions, and the image's pixels by content address."""

    keys: list[list[object]]
    positions: list
    images: dict


def vision_case(rng: random.Random, vocab: int, rollouts: int = 8, text: int = 766, answer: int = 128):
    """A GRPO group on one screenshot: <vision_start> image pads <vision_end>, text, answers (the
    three special ids are the vocabulary's last three, as `bench_vlm_checkpoint` declares them)."""
    image_token, start, end = vocab - 3, vocab - 2, vocab - 1
    t, h, w = SCREENSHOT_GRID
    pads = t * h * w // BENCH_VISION["spatial_merge_size"] ** 2
    head = [start] + [image_token] * pads + [end] + [rng.randrange(vocab - 3) for _ in range(text)]
    return [
        (head + [rng.randrange(vocab - 3) for _ in range(answer)], [0] * len(head) + [1] * answer)
        for _ in range(rollouts)
    ]


def vision_inputs(data, vocab: int, seed: int) -> VisionInputs:
    import torch

    from roost.rollout.vision.mrope import mrope_positions
    from roost.trainer.prefix_tree import ImagePixels

    image_token = vocab - 3
    t, h, w = SCREENSHOT_GRID
    patch = BENCH_VISION["in_channels"] * BENCH_VISION["temporal_patch_size"] * BENCH_VISION["patch_size"] ** 2
    pixels = torch.randn(t * h * w, patch, generator=torch.Generator().manual_seed(seed))
    keys, positions = [], []
    for tokens, _ in data:
        count = 0
        own: list[object] = []
        for token in tokens:
            own.append(("screenshot", count) if token == image_token else token)
            count += token == image_token
        keys.append(own)
        positions.append(mrope_positions(tokens, image_token, [SCREENSHOT_GRID], BENCH_VISION["spatial_merge_size"]))
    return VisionInputs(keys, positions, {"screenshot": ImagePixels(pixels, SCREENSHOT_GRID)})


CASES = {"grpo": grpo_case, "agentic": agentic_case, "vision": vision_case}


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
    extra = {}
    if case == "vision":
        inputs = vision_inputs(data, vocab, seed)
        extra = {"keys": inputs.keys, "mrope_positions": inputs.positions, "images": inputs.images}
    microbatches = build_microbatches(sequences, scored, ["group"] * len(data), budget, layout, **extra)
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


def bench_vlm_checkpoint(folder: Path, vocab: int, seed: int = 0) -> Path:
    """The vision case's Qwen3-VL model: `bench_checkpoint`'s language model (interleaved mrope
    over head_dim 64) under `BENCH_VISION`'s tower; the image and vision start/end ids are the
    vocabulary's last three."""
    import torch

    from roost.rollout.engine.tiny_model import TINY_VL_CONFIG
    from roost.rollout.engine.tiny_vlm import seeded_vlm

    torch.manual_seed(seed)
    text = {**TINY_VL_CONFIG["text_config"], **BENCH_CONFIG, "vocab_size": vocab, "initializer_range": 0.1}
    text["rope_parameters"] = {**text["rope_parameters"], "mrope_section": [12, 10, 10]}  # sums to head_dim / 2
    config = {
        **TINY_VL_CONFIG,
        "image_token_id": vocab - 3,
        "vision_start_token_id": vocab - 2,
        "vision_end_token_id": vocab - 1,
        "text_config": text,
        "vision_config": BENCH_VISION,
    }
    seeded_vlm(config).save_pretrained(folder, safe_serialization=True)
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
        text = bench_checkpoint(Path(tmp) / "bench-qwen3", vocab) if set(cases) - {"vision"} else None
        vision = bench_vlm_checkpoint(Path(tmp) / "bench-qwen3-vl", vocab) if "vision" in cases else None
        return [asdict(run_case(vision if case == "vision" else text, case, vocab, repeats, threads)) for case in cases]
