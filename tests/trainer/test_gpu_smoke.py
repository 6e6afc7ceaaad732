"""On a CUDA device: one tree-packed training step and one weight sync into the engine.

The CPU tests' path with the policy on the GPU (the local layer spec with SDPA, the default;
NCCL as the process group; `make gpu-check` covers bf16, Transformer Engine and SGLang). The
embedded engine runs on the CPU, so the sync also checks that GPU-trained weights serve what
the trainer scores.
Skipped without CUDA; `pytest -m gpu` runs only this.
"""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoTokenizer

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.store.samples import Sample
from roost.tests.trainer.test_train_and_sync import engine_logprobs
from roost.tests.trainer.trainer_fixtures import grpo_batch
from roost.trainer.advantages import AdvantageConfig, Group, compute_advantages
from roost.trainer.weight_sync import sync_weights

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

# The trainer's CUDA kernels (TE's GEMMs may run in TF32) against the engine's CPU ones.
LOGPROB_TOLERANCE = 5e-3


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    """This module's own engine: its weights get replaced."""
    process = EngineProcess("tiny")
    with process:
        yield process


async def test_a_tree_packed_step_on_the_gpu_then_the_engine_serves_its_weights(
    megatron_world, engine, tiny_model_path, tmp_path
):
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    policy = MegatronPolicy(TrainConfig(checkpoint=str(tiny_model_path), lr=1e-3, token_budget=4096))
    assert next(policy.model.parameters()).is_cuda
    assert policy.model.module.roost_attention == "sdpa"  # the default on a GPU too

    batch = grpo_batch(groups=2, size=4)
    scored, _ = compute_advantages([Group("g0", batch[:4]), Group("g1", batch[4:])], AdvantageConfig())
    stats = policy.train_step(scored)
    assert stats.updated and math.isfinite(stats.loss) and math.isfinite(stats.grad_norm)
    assert stats.tree_tokens < sum(len(s.tokens) for s in batch)  # the tree shared prefixes

    folder = policy.export_hf(tmp_path / "step-1")
    result = await sync_weights(engine.url, folder, weight_version="gpu-1", engine_key=engine.api_key)
    assert result.weight_version == "gpu-1"
    prompt = AutoTokenizer.from_pretrained(tiny_model_path)("The weather today")["input_ids"]
    ids, logprobs, version = await engine_logprobs(engine.url, prompt)
    assert version == "gpu-1"
    probe = Sample.from_turns([(prompt, ids, logprobs)], session_id="probe", group_id="probe")
    ours = policy.logprobs([probe])[0].cpu()
    assert float((ours - torch.tensor(logprobs)).abs().max()) <= LOGPROB_TOLERANCE
