"""The RL loop's side of on-policy distillation: its teacher engines score each step's samples.

    check_teachers(services)                # once: each teacher has the student's tokenizer
    metrics = teach(services, recipe, batch)   # sets Sample.teacher_logprobs; drops what failed

The teachers are the run's `teacher-NAME` engines (`setup.start_teachers`); the scoring and the
advantage are `roost.trainer.distill`'s. Samples a teacher failed to score leave the batch
(`teacher_failed`), so nothing is trained on a made-up score.
"""

from __future__ import annotations

import asyncio
from typing import Any

from roost.rollout.engine_api.client import engine_client
from roost.rollout.engine_api.model_identity import ModelIdentity

from ..distill import Route, Teachers, mean_reverse_kl
from ..recipe import Recipe
from .batches import Batch
from .setup import Services


def _teacher_clients(services: Services, recipe: Recipe) -> dict[str, Any]:
    return {
        name: engine_client(recipe.teachers[name].engine.backend, url, api_key=services.engine_key)
        for name, url in services.teachers.items()
    }


async def _identity(client: Any) -> ModelIdentity:
    info = await client.model_info()
    return await asyncio.to_thread(ModelIdentity.of, info)


def check_teachers(services: Services, recipe: Recipe) -> None:
    """Refuse (`TeacherError`) a teacher whose tokenizer is not the student's engine's."""

    async def check() -> None:
        student = engine_client(recipe.engine.backend, services.engine_url, api_key=services.engine_key)
        teachers = _teacher_clients(services, recipe)
        try:
            mine = await _identity(student)
            theirs = {name: await _identity(client) for name, client in teachers.items()}
        finally:
            for client in (student, *teachers.values()):
                await client.close()
        Teachers.check_tokenizer(mine, theirs)

    asyncio.run(check())


def teach(services: Services, recipe: Recipe, batch: Batch) -> dict[str, Any]:
    """Score the batch's samples with their teachers; the step's distillation metrics."""
    distill = recipe.distill
    if distill is None:
        return {}
    routes = [Route(r.teacher, r.env, r.task_tag, r.agent) for r in distill.routes]

    async def score() -> int:
        clients = _teacher_clients(services, recipe)
        try:
            return await Teachers(clients, routes, recipe.env.name).score(batch.groups)
        finally:
            for client in clients.values():
                await client.close()

    failed = asyncio.run(score())
    batch.groups = [g for g in batch.groups if g.samples]
    return {"teacher_failed": failed, "distill_reverse_kl": mean_reverse_kl(batch.groups)}
