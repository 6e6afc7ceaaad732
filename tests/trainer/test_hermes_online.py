"""Hermes online RL (recipes/hermes/cpu.yaml, asynchronous): episodes keep going while new
weights land. hermes-agent plays scripted tasks whose terminal command waits until the trainer
has finished a given step (a gate file the run's hook writes after each step's weight update),
so the timeline is fixed whatever the machine's speed:

    step 1 trains two quick episodes (verifier rewards 1 and 0), weights v0 → v1
    step 2 trains an episode whose calls ran on v0 and v1 (staleness 1, weighted by truncated
           importance sampling against the engine's logprobs) and a quick one, → v2
    step 3 drops an episode whose calls ran on v0 and v2 (staleness 2 > max_staleness 1)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from roost.tests.trainer.test_recipes_run import RECIPES, local_ray, rl_metrics  # noqa: F401 (a fixture)
from roost.trainer.recipe import load_recipe

# ~5.5 min on a loaded 2-core machine: eight hermes-agent episodes and three steps
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap"),
]

NEVER = 9
# What the episode of each group (in launch order) runs: the step its command waits for (0: none),
# and whether it then passes the verifier.
PLAN = [(0, True), (0, False), (1, True), (2, True), (0, False), (NEVER, True), (0, True), (NEVER, True)]


def hermes_tasks(gate: Path, seed: int) -> list[dict]:
    """One task per group, in the order the run draws them (`rollouts.pick`)."""
    from roost.envs.protocol import Task
    from roost.trainer.rl.rollouts import pick

    ids = [f"job{i}" for i in range(len(PLAN))]
    order = [pick([Task(i, "train") for i in ids], index, seed).id for index in range(len(PLAN))]
    tasks = []
    for task_id, (step, passes) in zip(order, PLAN):
        wait = f"until [ -e {gate}/after-step-{step} ]; do sleep 0.2; done; " if step else ""
        tasks.append(
            {
                "id": task_id,
                "split": "train",
                "instruction": f"Finish the {task_id} report.",
                "verifier": {"command": "test -f out.txt"},
                "solution": wait + ("echo ok > out.txt" if passes else "echo skipped"),
            }
        )
    return sorted(tasks, key=lambda t: t["id"])


def test_episodes_span_weight_versions_stale_ones_are_dropped_the_rest_weighted(tmp_path, local_ray):  # noqa: F811
    from roost.envs.hermes.scripted import solution_rules
    from roost.envs.hermes.task import HermesTask
    from roost.trainer.rl.loop import Hooks, train
    from roost.trainer.sample_sources import samples_from_store

    gate = tmp_path / "gate"
    gate.mkdir()
    tasks = hermes_tasks(gate, seed=0)
    (tmp_path / "tasks.json").write_text(json.dumps(tasks))
    rules = solution_rules([HermesTask.model_validate(t) for t in tasks])
    (tmp_path / "rules.json").write_text(json.dumps(rules))
    sandbox = {"backend": "bubblewrap", "timeout_s": 600, "bubblewrap": {"ro_binds": [str(gate)]}}
    run_dir = tmp_path / "run"
    recipe = load_recipe(
        RECIPES / "hermes" / "cpu.yaml",
        [
            "steps=3",
            f"output_dir={run_dir}",
            "metrics.console=false",
            "placement.num_cpus=2",
            "trainer.threads=1",
            f"env.kwargs.tasks={tmp_path / 'tasks.json'}",
            f"env.kwargs.sandbox={json.dumps(sandbox)}",
            "env.kwargs.command_timeout_s=600",
            "env.kwargs.max_tokens=128",
            "env.kwargs.max_iterations=3",
            "agent.max_turns=3",
            "agent.timeout_s=900",
            "trainer.lr=1.0e-3",
            "rollout.groups_per_step=2",
            "rollout.concurrency=4",
            "algorithm.max_staleness=1",
            f"engine.args=[--context-length, '16384', --sampler, scripted, --script, {tmp_path / 'rules.json'}]",
        ],
    )
    batches: dict[int, list] = {}

    def step_done(stage: str, step: int, metrics: dict) -> None:
        if stage == "rl":  # the weights of this step are in the engine now
            (gate / f"after-step-{step}").touch()

    summary = train(
        recipe, Hooks(advance=step_done, batch=lambda step, scored: batches.setdefault(step, scored), echo=print)
    )
    rl = rl_metrics(run_dir)
    by = {
        key: [m[key] for m in rl]
        for key in (
            "trainer_version",
            "weight_version",
            "trained_samples",
            "dropped_stale",
            "staleness_max",
            "mixed_version_samples",
            "oldest_version",
            "reward",
        )
    }
    assert by["trainer_version"] == [0, 1, 2] and by["weight_version"] == [1, 2, 3]
    assert by["trained_samples"] == [2, 2, 1] and by["dropped_stale"] == [0, 0, 1]
    assert by["staleness_max"] == [0, 1, 0] and by["mixed_version_samples"] == [0, 1, 0]
    assert by["oldest_version"] == [0, 0, 2]
    # the verifier's rewards (test -f out.txt) reach the trainer: one pass, one fail per step, signed advantages
    assert by["reward"] == [0.5, 0.5, 1.0]
    for step in (1, 2):
        assert sorted(s.sample.reward for s in batches[step]) == [0.0, 1.0]
        assert all((max(s.advantages, key=abs) > 0) == (s.sample.reward == 1.0) for s in batches[step])
    # the engine recorded each call's version; the episode of step 2 ran on two of them
    spanning = [s.sample for s in batches[2] if len(_versions(s.sample)) > 1]
    assert len(spanning) == 1 and _versions(spanning[0]) == ["0", "1"]
    stale = [s for s in samples_from_store(summary.store) if _versions(s) == ["0", "2"]]
    assert len(stale) == 1 and stale[0].session_id not in {s.sample.session_id for b in batches.values() for s in b}
    # on-policy tokens agree with the engine; v0's tokens, scored by v1's trainer, do not, and are
    # weighted min(exp(trainer - engine), cap) instead of 1
    assert rl[0]["logprob_mismatch"] < 1e-3 and abs(rl[0]["tis_mean"] - 1.0) < 1e-3
    assert rl[1]["logprob_mismatch"] > 10 * rl[0]["logprob_mismatch"]
    assert abs(rl[1]["tis_mean"] - 1.0) > 1e-4


def _versions(sample) -> list[str]:
    return sorted({sample.calls[c].weight_version for c, m in zip(sample.token_call, sample.loss_mask) if m})
