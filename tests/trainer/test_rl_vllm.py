"""The RL loop with vLLM as the rollout engine: ALFWorld fixture games → SFT → two GRPO steps,
vLLM started and supervised by the run (`engine.backend: vllm`), weights synced into it after
SFT and after each step; the engine's recorded logprobs are the trainer's on the same weights."""

from __future__ import annotations

import json

import pytest

from roost.tests.trainer.test_rl_loop import local_ray, tiny_recipe  # noqa: F401 (a fixture)
from roost.trainer.recipe import validate_recipe
from roost.trainer.rl.loop import train

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def test_two_grpo_steps_with_vllm_as_the_engine(tmp_path, local_ray, vllm_py):  # noqa: F811
    run_dir = tmp_path / "run"
    recipe = tiny_recipe(run_dir, eval__split=None)
    recipe["engine"] = {"backend": "vllm", "args": ["--optimization-level", "0", "--enforce-eager"]}
    # vLLM's CPU attention needs heads of 32 dimensions or more
    recipe["model"]["small_vocab"]["head_dim"] = 32
    summary = train(validate_recipe(recipe))
    assert summary.steps == 2
    rl = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rl = [m for m in rl if m["stage"] == "rl"]
    assert [m["step"] for m in rl] == [1, 2] and all(m["updated"] for m in rl)
    assert all(m["infra_error"] == 0 for m in rl)
    # vLLM's raw logprobs of what it sampled equal the trainer's on the same weights: after
    # SFT's sync and after step 1's (a stale tied output head would be off by nats)
    assert all(m["logprob_mismatch"] < 1e-3 for m in rl), [m["logprob_mismatch"] for m in rl]
    assert json.loads((run_dir / "state.json").read_text())["weight_version"] == 3
    assert (run_dir / "logs" / "vllm.log").is_file()
