"""The whole stack on Ray, a few steps: ALFWorld fixture games served by an env server, an
observing expert's transcripts → a small-vocabulary model → SFT → GRPO through the gateway and
the embedded engine, weights synced each step, checkpointed; then a resumed run that goes on
from the checkpoint in async mode."""

from __future__ import annotations

import json

import pytest

from roost.trainer.recipe import validate_recipe
from roost.trainer.rl.loop import train

pytestmark = pytest.mark.slow


@pytest.fixture
def local_ray():
    """One local Ray for both runs (the loop reuses a Ray that is already up)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def tiny_recipe(run_dir, **overrides) -> dict:
    recipe = {
        "name": "whole-stack",
        "env": {
            "name": "alfworld",
            "prepare": "roost.envs.alfworld.prepare:fixtures",
            "prepare_args": {"train": 4, "valid_seen": 0, "valid_unseen": 2, "receptacles": 3, "distractors": 1},
            "server": {"workers": 1, "max_episodes": 16},
        },
        "agent": {
            "harness": "tool",
            "tools": False,
            "args": {"temperature": 1.0, "max_tokens": 8},
            "max_turns": 2,
            "timeout_s": 60,
        },
        "model": {
            "small_vocab": {
                "vocab_size": 300,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "head_dim": 16,
            }
        },
        "sft": {"data": {"source": "expert", "episodes": 4}, "steps": 2, "batch_size": 2, "warmup_steps": 1},
        "trainer": {"lr": 1e-3, "warmup_steps": 2, "token_budget": 8192, "threads": 1, "loss": {"kl_coef": 0.01}},
        # zero-advantage groups still train (a random model rarely wins, and the loop must run)
        "algorithm": {"advantage": {"name": "grpo", "options": {"equal_rewards": "zero"}}},
        "rollout": {"groups_per_step": 2, "group_size": 2, "concurrency": 4},
        "eval": {"split": "valid_unseen", "episodes": 2, "before_episodes": 1},
        "schedule": {"steps": 2, "checkpoint_every": 1, "output_dir": str(run_dir)},
        "placement": {"num_cpus": 2},
        "metrics": {"console": False},
        "gateway": {},
    }
    for key, value in overrides.items():
        section, _, field = key.partition("__")
        recipe[section] = {**recipe[section], field: value}
    return recipe


def test_sft_then_grpo_through_the_whole_stack_then_resume_async(tmp_path, local_ray):
    run_dir, bucket = tmp_path / "run", tmp_path / "bucket"
    uri = f"file://{bucket}/whole-stack"  # each checkpoint copied there too (schedule.checkpoint_uri)
    summary = train(validate_recipe(tiny_recipe(run_dir, schedule__checkpoint_uri=uri)))
    assert summary.steps == 2 and set(summary.evals) == {"before", "after_sft", "final"}
    played = {label: e["scored"] + sum(e["left_out"].values()) for label, e in summary.evals.items()}
    assert played == {"before": 1, "after_sft": 2, "final": 2}
    for e in summary.evals.values():  # one episode a held-out game: each game's success kept for pairing
        assert len(e["per_task"]) == e["scored"] and set(e["per_task"].values()) <= {0.0, 1.0}
        assert sum(e["per_task"].values()) / e["scored"] == pytest.approx(e["success_rate"])
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    sft = [m for m in lines if m["stage"] == "sft"]
    rl = [m for m in lines if m["stage"] == "rl"]
    assert [m["step"] for m in sft] == [1, 2] and sft[1]["loss"] < sft[0]["loss"] + 1.0
    assert [m["step"] for m in rl] == [1, 2] and all(m["updated"] for m in rl)
    assert [m["lr"] for m in rl] == pytest.approx([5e-4, 1e-3])  # RL's own warmup after SFT
    # kl_coef > 0: the reference (the policy after SFT) is loaded when RL starts; the random
    # model's groups carry zero advantages, so the policy has not moved away from it
    assert [m["kl"] for m in rl] == pytest.approx([0.0, 0.0], abs=1e-6)
    for key in (
        "reward",
        "success",
        "clip_fraction",
        "entropy",
        "logprob_mismatch",
        "staleness",
        "rollout_tokens_per_s",
        "tree_saving",
        "infra_error",
        "timeout",
    ):
        assert key in rl[0], key
    assert rl[0]["logprob_mismatch"] < 1e-3  # engine and trainer agree on the same weights
    state = json.loads((run_dir / "state.json").read_text())
    # weights: 1 after SFT, then one version per RL step
    assert (state["step"], state["weight_version"], state["sft_done"]) == (2, 3, True)
    assert (run_dir / "checkpoints" / "step-2" / "hf" / "model.safetensors").is_file()
    assert (run_dir / "checkpoints" / "step-2" / "trainer" / "rank-0.pt").is_file()
    copied = bucket / "whole-stack"
    assert json.loads((copied / "state.json").read_text())["checkpoint"] == "checkpoints/step-2"
    for name in ("hf/model.safetensors", "trainer/rank-0.pt"):
        assert (copied / "checkpoints" / "step-2" / name).read_bytes() == (
            run_dir / "checkpoints" / "step-2" / name
        ).read_bytes()

    assert [m["allowed_mass"] for m in rl] == [1.0, 1.0]  # free replies: nothing masked

    # replies held to the admissible commands from here: trained over the commands alone
    held = {"temperature": 1.0, "max_tokens": 8, "allowed_replies_from": "admissible_commands"}
    resumed = train(
        validate_recipe(
            tiny_recipe(
                run_dir,
                # a budget spent within the first step: step 3 ends the run (5 not reached), and is
                # checkpointed as its last though checkpoint_every would skip it
                schedule__steps=5,
                schedule__max_minutes=1e-6,
                schedule__checkpoint_every=2,
                algorithm__mode="async",
                algorithm__max_staleness=1,
                eval__split=None,
                agent__args=held,
                gateway__workers=2,  # recorded through two gateway processes behind one port
            )
        )
    )
    assert resumed.steps == 3
    assert "gateway relay: 2 workers" in (run_dir / "logs" / "gateway.log").read_text()
    rl = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rl = [m for m in rl if m["stage"] == "rl"]
    assert [m["step"] for m in rl] == [1, 2, 3] and rl[-1]["weight_version"] == 4
    assert 0.0 < rl[-1]["allowed_mass"] < 0.5 and rl[-1]["grammar_replay_failures"] == 0  # a random model's mass
    assert rl[-1]["lr"] == pytest.approx(1e-3)  # a resumed run continues after its warmup
    assert json.loads((run_dir / "state.json").read_text())["checkpoint"].endswith("checkpoints/step-3")
    assert (run_dir / "checkpoints" / "step-3" / "hf" / "model.safetensors").is_file()
    assert json.loads((run_dir / "state.json").read_text())["step"] == 3
