"""Which tasks RL plays: a seeded pool of the split (`env.max_tasks`), visited epoch by epoch."""

from __future__ import annotations

from roost.envs.protocol import Task
from roost.trainer.rl.rollouts import pick, task_pool

TASKS = [Task(id=f"train/{i:03d}", split="train") for i in range(40)]


def test_the_pool_is_a_seeded_sample_in_split_order():
    pool = task_pool(TASKS, 8, seed=3)
    assert len(pool) == 8 and len(set(t.id for t in pool)) == 8
    assert pool == sorted(pool, key=lambda t: t.id) and pool == task_pool(TASKS, 8, seed=3)
    assert pool != task_pool(TASKS, 8, seed=4) and pool != TASKS[:8]


def test_no_limit_or_a_limit_past_the_split_keeps_every_task():
    assert task_pool(TASKS, None, seed=0) == TASKS and task_pool(TASKS, 99, seed=0) == TASKS


def test_each_epoch_plays_every_pooled_task_once_in_a_new_order():
    pool = task_pool(TASKS, 6, seed=1)
    epochs = [[pick(pool, e * 6 + i, seed=1).id for i in range(6)] for e in range(3)]
    assert all(sorted(epoch) == sorted(t.id for t in pool) for epoch in epochs)
    assert len({tuple(epoch) for epoch in epochs}) > 1
