"""Multi-agent credit (recipes/multi_agent/cpu.yaml): the planner–executor harness plays ALFWorld
fixture games through the gateway; both agents' calls are recorded under the episode's one
session, the recipe's hook (`credit.py:planner_share`) gives the planner half the executor's
GRPO advantage, and the batch the trainer packs holds both agents' tokens with those advantages.

The engine is scripted so the two episodes of a group differ: the executor's first call says a
valid command in one and an invalid one in the other (a rule's replies are said in turn), and
the invalid action's penalty lowers that episode's shared reward."""

from __future__ import annotations

import json
import re

import pytest

from roost.tests.trainer.test_recipes_run import RECIPES, local_ray, rl_metrics  # noqa: F401 (a fixture)
from roost.trainer.recipe import load_recipe

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_both_agents_train_in_one_session_with_the_hooks_advantages(tmp_path, local_ray):  # noqa: F811
    from roost.agents.planner_executor import PLANNER_PROMPT
    from roost.envs.hermes.scripted import tool_call
    from roost.trainer.prefix_tree import build_microbatches
    from roost.trainer.rl.loop import Hooks, train

    rules = {
        "rules": [
            {"match": re.escape(PLANNER_PROMPT), "reply": "1. look around\n2. take what the task names"},
            {
                "match": re.escape("The planner's plan:"),
                "reply": [tool_call("act", {"command": "look"}), tool_call("act", {"command": "fly to the moon"})],
            },
        ]
    }
    (tmp_path / "rules.json").write_text(json.dumps(rules))
    run_dir = tmp_path / "run"
    recipe = load_recipe(
        RECIPES / "multi_agent" / "cpu.yaml",
        [
            "steps=1",
            f"output_dir={run_dir}",
            "eval.split=null",
            "metrics.console=false",
            "placement.num_cpus=2",
            "trainer.threads=1",
            "agent.max_turns=1",
            "rollout.groups_per_step=1",
            "rollout.group_size=2",
            "rollout.invalid_action_penalty=0.1",
            "env.prepare_args={train: 2, valid_seen: 0, valid_unseen: 0, receptacles: 3, distractors: 1}",
            f"engine.args=[--sampler, scripted, --script, {tmp_path / 'rules.json'}]",
        ],
    )
    batches: dict[int, list] = {}
    train(recipe, Hooks(batch=lambda step, scored: batches.setdefault(step, scored), echo=print))
    assert [m["updated"] for m in rl_metrics(run_dir)] == [True]

    scored = batches[1]
    sessions: dict[str, dict[str, float]] = {}
    for item in scored:
        values = {a for a, m in zip(item.advantages, item.sample.loss_mask) if m}
        assert len(values) == 1, values  # one advantage per agent per episode, on all its sampled tokens
        sessions.setdefault(item.sample.session_id, {})[item.sample.agent_id] = values.pop()
    # two episodes, each with both agents' calls under its one session
    assert len(sessions) == 2 and all(set(agents) == {"planner", "executor"} for agents in sessions.values())
    rewards = sorted({item.sample.reward for item in scored})
    assert rewards == pytest.approx([-0.1, 0.0])  # the invalid action's penalty, shared by both agents
    for agents in sessions.values():
        assert agents["executor"] != 0.0
        assert agents["planner"] == pytest.approx(0.5 * agents["executor"])  # credit.py: share 0.5
    assert sorted(a["executor"] for a in sessions.values()) == pytest.approx([-0.70711, 0.70711], abs=1e-4)

    # the packed batch: every sample of both agents in a microbatch, its sampled tokens scored
    samples = [item.sample for item in scored]
    positions = [[i for i, m in enumerate(s.loss_mask) if m] for s in samples]
    packed = build_microbatches(
        [s.tokens for s in samples],
        positions,
        [s.group_id for s in samples],
        recipe.trainer.token_budget,
        recipe.trainer.layout,
    )
    placed = {index: len(scores) for mb in packed for index, scores in zip(mb.sample_index, mb.sample_scores)}
    assert sorted(placed) == list(range(len(samples)))
    assert all(placed[i] == len(positions[i]) > 0 for i in placed)
