"""On-policy distillation: the reverse-KL advantage against numbers worked by hand, its mix with
the env's GRPO advantage, routing among teachers, a teacher of another tokenizer refused, a
teacher that fails leaving its samples out; and a real teacher engine scoring real samples."""

from __future__ import annotations

import asyncio
import math

import pytest

from roost.rollout.engine_api.model_identity import ModelIdentity
from roost.rollout.engine_api.sglang_client import SGLangClient
from roost.rollout.store.samples import CallRef, Sample
from roost.trainer.advantages import AdvantageConfig, AdvantageError, EstimatorConfig, Group, compute_advantages
from roost.trainer.distill import Route, TeacherError, Teachers, distill, mean_reverse_kl, reverse_kl

PROMPT = [151644, 872, 198, 9707, 11, 1246, 525, 498, 30, 151645, 198, 151644, 77091, 198]


def sample(session: str, reward: float, student: list[float], teacher: list[float] | None, **fields) -> Sample:
    """Two context tokens, then len(student) sampled ones by one call."""
    n = len(student)
    return Sample(
        session_id=session,
        group_id="g",
        agent_id=fields.pop("agent", "main"),
        tokens=list(range(2 + n)),
        loss_mask=[0, 0] + [1] * n,
        rollout_logprobs=[0.0, 0.0, *student],
        token_call=[-1, -1] + [0] * n,
        calls=[CallRef(call_id=f"{session}-c", weight_version="1")],
        reward=reward,
        teacher_logprobs=None if teacher is None else [math.nan, -1.0, *teacher],
        **fields,
    )


def test_the_advantage_is_the_teachers_logprob_minus_the_students_on_sampled_tokens():
    s = sample("a", 1.0, student=[-0.5, -2.0], teacher=[-1.5, -0.25])
    assert reverse_kl(s) == [0.0, 0.0, 1.0, -1.75]
    assert distill(Group("g", [s]), coef=2.0) == [[-0.0, -0.0, -2.0, 3.5]]
    # mixed with GRPO over rewards 1 and 0 (no scaling): +0.5 and -0.5 on every sampled token
    t = sample("b", 0.0, student=[-1.0, -1.0], teacher=[-1.0, -3.0])
    mixed = distill(Group("g", [s, t]), env_weight=0.5, env_options={"scale": False})
    assert mixed == [[0.0, 0.0, -1.0 + 0.25, 1.75 + 0.25], [0.0, 0.0, 0.0 - 0.25, -2.0 - 0.25]]
    assert mean_reverse_kl([Group("g", [s, t])]) == pytest.approx((1.0 - 1.75 + 0.0 + 2.0) / 4)


def test_the_estimator_is_named_distill_and_a_sample_without_teacher_scores_is_an_error():
    s, t = sample("a", 1.0, [-0.5], [-0.5]), sample("b", 1.0, [-1.0], [-2.0])
    config = AdvantageConfig(EstimatorConfig("distill", {"coef": 1.0}))
    scored, _ = compute_advantages([Group("g", [s, t])], config)
    # equal rewards drop a GRPO group; distillation alone still teaches it
    assert [x.advantages[2] for x in scored] == [0.0, -1.0]
    with pytest.raises(AdvantageError, match="no teacher scores"):
        distill(Group("g", [sample("c", 1.0, [-1.0], None)]))


def test_samples_go_to_the_first_matching_route():
    teachers = Teachers(
        {"coder": object(), "judge": object(), "any": object()},
        [Route("coder", task_tag="code"), Route("judge", agent="critic"), Route("any")],
        env="alfworld",
    )
    assert teachers.teacher_of(sample("a", 1, [-1], None, task={"tags": ["code"]})) == "coder"
    assert teachers.teacher_of(sample("b", 1, [-1], None, agent="critic")) == "judge"
    assert teachers.teacher_of(sample("c", 1, [-1], None)) == "any"
    with pytest.raises(TeacherError, match="not among"):
        Teachers({"any": object()}, [Route("missing")])
    narrow = Teachers({"x": object()}, [Route("x", env="webshop")], env="alfworld")
    with pytest.raises(TeacherError, match="no distill route matches"):
        narrow.teacher_of(sample("d", 1, [-1], None))


def test_a_teacher_of_another_tokenizer_is_refused(tiny_model_path):
    from roost.rollout.engine.tiny_model import tiny_model_dir

    def identity(folder, vocab: int) -> ModelIdentity:
        return ModelIdentity.of({"model_path": str(folder), "architecture": "qwen3", "vocab_size": vocab})

    student = identity(tiny_model_path, 151936)
    same_tokenizer = identity(tiny_model_dir(variant="tiny-vllm"), 151936)  # another architecture: fine
    Teachers.check_tokenizer(student, {"wide": same_tokenizer})
    with pytest.raises(TeacherError, match="another tokenizer"):
        Teachers.check_tokenizer(student, {"small": identity(tiny_model_path, 1024)})


def test_a_real_teacher_scores_recorded_ids_and_a_dead_one_leaves_its_samples_out(engine_url):
    async def scenario():
        async with SGLangClient(engine_url) as live:
            got = await live.generate(PROMPT, {"max_new_tokens": 5, "temperature": 1.0, "sampling_seed": 11})
            tokens = PROMPT + got.output_ids
            n = len(got.output_ids)
            good = Sample(
                session_id="live",
                group_id="g",
                agent_id="main",
                tokens=tokens,
                loss_mask=[0] * len(PROMPT) + [1] * n,
                rollout_logprobs=[0.0] * len(PROMPT) + got.output_logprobs,
                token_call=[-1] * len(PROMPT) + [0] * n,
                calls=[CallRef(call_id="c", weight_version="1")],
                reward=1.0,
            )
            bad = Sample(**{**good.__dict__, "session_id": "to-the-dead", "agent_id": "other"})
            dead = SGLangClient("http://127.0.0.1:9", connect_timeout_s=1.0)
            teachers = Teachers({"live": live, "dead": dead}, [Route("dead", agent="other"), Route("live")])
            group = Group("g", [good, bad])
            failed = await teachers.score([group])
            await dead.close()
            return failed, group, got

    failed, group, got = asyncio.run(scenario())
    assert failed == 1 and [s.session_id for s in group.samples] == ["live"]
    # the same weights score the tokens they sampled as they sampled them: no KL, no advantage
    assert max(abs(kl) for kl in reverse_kl(group.samples[0])) <= 1e-5
