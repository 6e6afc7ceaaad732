"""`make gpu-check`: the GPU path on the tiny model, one JSON line per check.

    python -m roost.trainer.gpu_check            # on a machine with CUDA
    python -m roost.trainer.gpu_check --cpu      # the trainer checks on the CPU (SGLang's skipped)

1. `tree_vs_flat_bf16`: one tree-packed Megatron step in bf16, then the logprobs of the tree
   layout against the flat layout's (same weights).
2. `te_tree_mask`: where Transformer Engine runs, its attention (arbitrary mask type) on the
   tree against SDPA's chain-wise attention.
3. `sglang_sync`: SGLang started as roost's recipes start it (`sglang_command`, `engine_env`),
   the step's weights synced into it, its logprobs of a continuation sampled at temperature
   0.25 against the trainer's (a temperature-scaled engine is off by ~0.1 here).

Each line has `check` and `status` (pass, fail or skip) and what was measured. Without CUDA
(and without --cpu) it prints one line saying so and exits 0; otherwise it exits 1 when a check
fails.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

BF16_TOLERANCE = 3e-2
"""Largest |difference| of two bf16 computations of one logprob (the tiny model's logits are O(1))."""
SGLANG_TEMPERATURE = 0.25


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m roost.trainer.gpu_check", description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", action="store_true", help="Run the trainer checks on the CPU (SGLang's is skipped).")
    parser.add_argument("--sglang-timeout", type=float, default=600.0, help="Seconds SGLang may take to start.")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() and not args.cpu:
        report(
            {
                "check": "cuda",
                "status": "skip",
                "reason": "no CUDA device here; run make gpu-check on a machine "
                "with one (--cpu runs the trainer checks on the CPU)",
            }
        )
        return 0
    results = run_checks(args.sglang_timeout)
    return int(any(result["status"] == "fail" for result in results))


def report(result: dict[str, Any]) -> dict[str, Any]:
    print(json.dumps(result), flush=True)
    return result


def run_checks(sglang_timeout_s: float) -> list[dict[str, Any]]:
    from roost.rollout.engine.tiny_model import tiny_model_dir

    from .megatron import parallel

    parallel.init(tp=1)
    try:
        model = tiny_model_dir()
        try:
            policy, samples, step = _trained_policy(model)
        except Exception as exc:  # noqa: BLE001 - reported; the other checks need the trained policy
            return [report({"check": "tree_vs_flat_bf16", "status": "fail", "error": f"{type(exc).__name__}: {exc}"})]
        checks: list[tuple[str, Callable[[], dict[str, Any]]]] = [
            ("tree_vs_flat_bf16", lambda: _tree_vs_flat(policy, samples, step)),
            ("te_tree_mask", lambda: _te_tree_mask(policy, samples)),
            ("sglang_sync", lambda: _sglang_sync(policy, model, sglang_timeout_s)),
        ]
        return [report({"check": name, **_guarded(check)}) for name, check in checks]
    finally:
        parallel.shutdown()


def _guarded(check: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return check()
    except Exception as exc:  # noqa: BLE001 - a failed check is reported, the others still run
        return {"status": "fail", "error": f"{type(exc).__name__}: {exc}"}


def _verdict(worst: float, tolerance: float) -> dict[str, Any]:
    ok = math.isfinite(worst) and worst <= tolerance
    return {"status": "pass" if ok else "fail", "max_abs_diff": worst, "tolerance": tolerance}


def _max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x.float().cpu() - y.float().cpu()).abs().max()) for x, y in zip(a, b, strict=True))


def _batch(vocab: int, seed: int = 0) -> list:
    """Two groups of four rollouts sharing their prompt; odd ones share their answers' start too."""
    from roost.rollout.store.samples import Sample

    rng = random.Random(seed)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(vocab) for _ in range(n)]

    samples = []
    for group in range(2):
        prompt, shared = tokens(24), tokens(3)
        for i in range(4):
            answer = (shared if i % 2 else []) + tokens(8 - (3 if i % 2 else 0))
            samples.append(
                Sample.from_turns(
                    [(prompt, answer, [-rng.random() * 3 for _ in answer])],
                    session_id=f"g{group}s{i}",
                    group_id=f"g{group}",
                    reward=float(i % 3),
                )
            )
    return samples


def _trained_policy(model: Path):
    from .advantages import AdvantageConfig, Group, compute_advantages
    from .megatron.train import MegatronPolicy, TrainConfig

    policy = MegatronPolicy(TrainConfig(checkpoint=str(model), dtype="bfloat16", lr=1e-3, token_budget=4096))
    samples = _batch(policy.spec.vocab_size)
    groups = [Group(g, [s for s in samples if s.group_id == g]) for g in ("g0", "g1")]
    scored, _ = compute_advantages(groups, AdvantageConfig())
    return policy, samples, policy.train_step(scored)


def _tree_vs_flat(policy, samples, step) -> dict[str, Any]:
    tree, flat = policy.logprobs(samples, layout="tree"), policy.logprobs(samples, layout="flat")
    result = _verdict(_max_diff(tree, flat), BF16_TOLERANCE)
    if not (step.updated and math.isfinite(step.loss) and math.isfinite(step.grad_norm)):
        result["status"] = "fail"
    device = next(policy.model.parameters()).device
    return {
        **result,
        "device": str(device),
        "step_loss": step.loss,
        "grad_norm": step.grad_norm,
        "tree_tokens": step.tree_tokens,
        "flat_tokens": sum(len(s.tokens) for s in samples),
    }


def _te_tree_mask(policy, samples) -> dict[str, Any]:
    from .megatron import convert
    from .megatron.model import build_gpt_model, transformer_engine_available

    if not transformer_engine_available():
        return {"status": "skip", "reason": "Transformer Engine is not installed (or no CUDA)"}
    te = build_gpt_model(policy.spec, policy.mcore_config, "te")
    state = convert.hf_to_megatron(policy.hf_state(), policy.spec, te=True)
    convert.load_into(te, {k: v.to(policy.mcore_config.params_dtype) for k, v in state.items()})
    te.cuda()
    worst = _max_diff(policy.logprobs(samples, model=te), policy.logprobs(samples))
    return _verdict(worst, BF16_TOLERANCE)


def _sglang_sync(policy, model: Path, timeout_s: float) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from roost.rollout.store.samples import Sample

    if not torch.cuda.is_available():
        return {"status": "skip", "reason": "SGLang serves on a GPU only"}
    if importlib.util.find_spec("sgl_kernel") is None:
        return {
            "status": "skip",
            "reason": "SGLang's serving dependencies are missing (sgl_kernel): "
            "pip install sglang==0.5.3 with its dependencies",
        }
    folder = Path(tempfile.mkdtemp(prefix="roost-gpu-check-"))  # kept: SGLang's log is there
    checkpoint = policy.export_hf(folder / "step-1")
    prompt = AutoTokenizer.from_pretrained(model)("The weather today")["input_ids"]
    generation = asyncio.run(_served_generation(model, checkpoint, prompt, timeout_s))
    probe = Sample.from_turns(
        [(prompt, generation.output_ids, generation.output_logprobs)], session_id="probe", group_id="probe"
    )
    ours = policy.logprobs([probe])[0]
    result = _verdict(_max_diff([ours], [torch.tensor(generation.output_logprobs)]), BF16_TOLERANCE)
    if generation.weight_version != "gpu-check-1":
        result.update(status="fail", weight_version=generation.weight_version)
    return {
        **result,
        "temperature": SGLANG_TEMPERATURE,
        "tokens": len(generation.output_ids),
        "log": str(folder / "sglang.log"),
    }


async def _served_generation(model: Path, checkpoint: Path, prompt: list[int], timeout_s: float):
    """Start SGLang as a recipe does, load `checkpoint` into it, sample a continuation of `prompt`."""
    from roost.rollout.engine_api.sglang_client import SGLangClient
    from roost.rollout.keys import ENGINE_KEY, new_key

    from .recipe import validate_recipe
    from .rl.services import SupervisedServer, engine_env, sglang_command, sglang_port
    from .weight_sync import sync_weights

    # The tiny model's 16-dimension heads: Triton's attention takes them; no CUDA graphs, a quick start.
    recipe = validate_recipe(
        {
            "name": "gpu-check",
            "env": {"name": "none"},
            "placement": {"engine_gpus": 1},
            "engine": {
                "backend": "sglang",
                "dtype": "bfloat16",
                "args": ["--attention-backend", "triton", "--disable-cuda-graph", "--mem-fraction-static", "0.3"],
            },
        }
    )
    key, port = new_key(ENGINE_KEY), sglang_port("127.0.0.1")
    server = SupervisedServer(
        "sglang",
        sglang_command(recipe, str(model), "127.0.0.1", port, key),
        "127.0.0.1",
        port,
        log_dir=checkpoint.parent,
        startup_timeout_s=timeout_s,
        env=engine_env(recipe, key),
    )
    await asyncio.to_thread(server.start)
    try:
        await sync_weights(
            server.url, checkpoint, weight_version="gpu-check-1", engine_key=key, engine_backend="sglang"
        )
        async with SGLangClient(server.url, api_key=key) as client:
            return await client.generate(
                prompt, {"max_new_tokens": 16, "temperature": SGLANG_TEMPERATURE, "ignore_eos": True}
            )
    finally:
        await asyncio.to_thread(server.stop)


if __name__ == "__main__":
    raise SystemExit(main())
