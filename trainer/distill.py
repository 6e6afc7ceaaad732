"""On-policy distillation: a teacher scores the student's own sampled tokens; the advantage of
each is how much more the teacher likes it than the student did.

The student samples (the run's rollouts, recorded token by token); each training sample's whole
path goes to a teacher engine as token ids (`EngineClient.score`: its logprob of every token given
the ones before it, no re-tokenization); on each sampled token t the advantage is the negative of
the per-token reverse KL estimate, `coef * (log p_teacher(t) - log p_student(t))`, with the
student's logprob as the engine sampled it. Optionally mixed with the env reward's advantage
(`env_weight` times the recipe's estimator, spread over the sampled tokens), as tinker-cookbook's
distillation recipe and Thinking Machines' "on-policy distillation" do.

    teachers = Teachers({"strong": client}, [Route("strong")])
    teachers.check_tokenizer(student_identity, identities)   # another tokenizer: refused
    failed = await teachers.score(groups)                     # sets Sample.teacher_logprobs
    advantages = distill(group, coef=1.0)                     # the estimator, by name "distill"

Several teachers: each sample goes to the first route that matches its env, a tag of its task
(`task["tags"]`) or its agent id. A teacher that fails leaves its samples out of the step (counted
`teacher_failed`): nothing is trained on a made-up score.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from roost.rollout.engine_api.model_identity import ModelIdentity
from roost.rollout.engine_api.sglang_client import EngineError
from roost.rollout.store.samples import Sample

from .advantages import AdvantageError, EstimatorResult, Group, load_estimator, per_token

if TYPE_CHECKING:
    from roost.rollout.engine_api.client import EngineClient

log = logging.getLogger("roost.trainer.distill")
SCORES_AT_ONCE = 8  # samples scored concurrently per step (each a prefill on its teacher)


class TeacherError(ValueError):
    """A teacher cannot teach this student (another tokenizer), or no route names a sample's teacher."""


@dataclass(frozen=True)
class Route:
    """Which teacher scores a sample: the first route whose given fields all match it."""

    teacher: str
    env: str | None = None
    task_tag: str | None = None
    agent: str | None = None

    def matches(self, sample: Sample, env: str) -> bool:
        tags = sample.task.get("tags") or []
        return (
            (self.env is None or self.env == env)
            and (self.task_tag is None or self.task_tag in tags)
            and (self.agent is None or self.agent == sample.agent_id)
        )


class Teachers:
    def __init__(self, clients: dict[str, EngineClient], routes: Sequence[Route], env: str = "") -> None:
        unknown = sorted({r.teacher for r in routes} - set(clients))
        if unknown:
            raise TeacherError(f"distill routes name teacher(s) {unknown} that are not among {sorted(clients)}")
        self.clients, self.routes, self.env = clients, list(routes), env

    def teacher_of(self, sample: Sample) -> str:
        for route in self.routes:
            if route.matches(sample, self.env):
                return route.teacher
        raise TeacherError(
            f"no distill route matches session {sample.session_id} (env {self.env!r}, agent "
            f"{sample.agent_id!r}, tags {sample.task.get('tags') or []}); add a route without conditions last"
        )

    @staticmethod
    def check_tokenizer(student: ModelIdentity, teachers: dict[str, ModelIdentity]) -> None:
        """Refuse a teacher whose token ids mean other text than the student's: its scores of the
        student's ids would be of other tokens."""
        for name, teacher in teachers.items():
            differs = [
                d
                for d in teacher.differences(student)
                if d.split(" ", 1)[0] in ("tokenizer", "vocab_size", "eos_token_ids")
            ]
            if differs:
                raise TeacherError(
                    f"teacher {name!r} has another tokenizer than the student ({'; '.join(differs)}): it would "
                    "score other tokens than the student sampled; distil from a teacher of the same tokenizer"
                )

    async def score(self, groups: Sequence[Group]) -> int:
        """Each sample's `teacher_logprobs` from its teacher; a sample its teacher failed to score
        is taken out of its group. Returns how many were."""
        limit = asyncio.Semaphore(SCORES_AT_ONCE)

        async def one(sample: Sample) -> bool:
            client = self.clients[self.teacher_of(sample)]
            async with limit:
                try:
                    scores = await client.score(list(sample.tokens))
                except EngineError as exc:
                    log.warning("teacher failed to score session %s: %s", sample.session_id, exc)
                    return False
            sample.teacher_logprobs = scores
            return True

        failed = 0
        for group in groups:
            scored = await asyncio.gather(*(one(s) for s in group.samples))
            failed += scored.count(False)
            group.samples = [s for s, ok in zip(group.samples, scored) if ok]
        return failed


def reverse_kl(sample: Sample) -> list[float]:
    """Per token, log p_student - log p_teacher on the sampled tokens (0 elsewhere): the sample's
    per-token reverse KL estimate (its mean is the step's `distill_reverse_kl`)."""
    teacher = sample.teacher_logprobs
    if teacher is None or len(teacher) != len(sample.tokens):
        raise AdvantageError(
            f"session {sample.session_id} agent {sample.agent_id}: no teacher scores of its {len(sample.tokens)} "
            "tokens (distill needs a teacher: set `teachers` and `distill.routes` in the recipe)"
        )
    out = []
    for mask, student, scored in zip(sample.loss_mask, sample.rollout_logprobs, teacher):
        if mask and math.isnan(scored):
            raise AdvantageError(f"session {sample.session_id}: the teacher gave no score to a sampled token")
        out.append(student - scored if mask else 0.0)
    return out


def distill(
    group: Group,
    *,
    coef: float = 1.0,
    env_weight: float = 0.0,
    env_estimator: str = "grpo",
    env_options: dict[str, Any] | None = None,
) -> EstimatorResult:
    """Per-token advantages `-coef * reverse_kl`, plus `env_weight` times the env reward's
    advantages from `env_estimator` (spread over the sampled tokens). A group the env estimator
    drops (all rewards equal under grpo) keeps its distillation advantages."""
    advantages = [[-coef * kl for kl in reverse_kl(s)] for s in group.samples]
    if not env_weight:
        return advantages
    result = load_estimator(env_estimator)(group, **(env_options or {}))
    if result is None:
        return advantages
    env = per_token(group, result, env_estimator)
    return [[a + env_weight * e for a, e in zip(mine, theirs)] for mine, theirs in zip(advantages, env)]


def mean_reverse_kl(groups: Sequence[Group]) -> float | None:
    """The mean per-token reverse KL over the sampled tokens of the groups' scored samples."""
    total = count = 0.0
    for sample in (s for g in groups for s in g.samples if s.teacher_logprobs is not None):
        for mask, kl in zip(sample.loss_mask, reverse_kl(sample)):
            if mask:
                total, count = total + kl, count + 1
    return total / count if count else None
