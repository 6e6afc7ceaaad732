"""tinker-cookbook's on-policy distillation loop (`tinker_cookbook.distillation.train_on_policy.main`),
unchanged, against a real `roost tinker serve` serving two base models of one tokenizer: the tiny
model as the student, and a sharper tiny model as the teacher. The prompts come through the
cookbook's own `PromptOnlyDataset` (its builder downloads DeepMath or Tulu 3; this one is given
the prompts); the teacher scores every sampled sequence with `compute_logprobs`, which roost
answers from the teacher's engine and records in its trajectory store."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
from pathlib import Path

import chz
import pytest
from tinker_cookbook.rl.types import RLDataset, RLDatasetBuilder

from roost.rollout.store.reader import TrajectoryReader

from .conftest import API_KEY, tinker_server
from .cookbook_runs import read_metrics

pytestmark = pytest.mark.slow

STEPS = 3
GROUPS = 2
GROUP_SIZE = 2
PROMPTS = [f"Name a colour, number {i}." for i in range(STEPS * GROUPS)]


def sharper_teacher(student: Path, folder: Path) -> Path:
    """The student with its (tied) embeddings scaled by 4: the same tokenizer and architecture, its
    logits four times as large, so its distribution differs clearly from the student's."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(student, folder)
    weights = load_file(student / "model.safetensors")
    weights = {name: t * 4 if "embed_tokens" in name else t for name, t in weights.items()}
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


@chz.chz
class GivenPromptsBuilder(RLDatasetBuilder):
    """The cookbook's `PromptOnlyDataset` over `PROMPTS`, as its `PromptOnlyDatasetBuilder` builds
    one over a downloaded dataset."""

    model_path: str

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        from tinker_cookbook import renderers
        from tinker_cookbook.distillation.datasets import PromptOnlyDataset
        from tinker_cookbook.tokenizer_utils import get_tokenizer

        tokenizer = get_tokenizer(self.model_path)
        renderer = renderers.get_renderer("qwen3", tokenizer=tokenizer)
        return PromptOnlyDataset(PROMPTS, GROUPS, GROUP_SIZE, renderer, tokenizer), None


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_model_path: Path):
    """The server with the student and teacher folders as base models (the cookbook names a model by
    the string it loads the tokenizer from); its URL, its store and the teacher's folder."""
    teacher = sharper_teacher(tiny_model_path, tmp_path_factory.mktemp("teacher") / "sharper-tiny")
    folder = tmp_path_factory.mktemp("cookbook-distill")
    args = ("--base-model", str(tiny_model_path), "--base-model", str(teacher))
    with tinker_server(folder, *args) as url:
        yield url, folder / "trajectories.sqlite", teacher


def test_the_cookbook_distillation_loop_runs_and_its_teacher_scores_reach_the_server(
    served, tiny_model_path, tmp_path, monkeypatch
):
    from tinker_cookbook.distillation import train_on_policy
    from tinker_cookbook.distillation.datasets import DistillationDatasetConfig, TeacherConfig

    url, store, teacher = served
    monkeypatch.setenv("TINKER_API_KEY", API_KEY)
    log_path = tmp_path / "run"
    config = train_on_policy.Config(
        learning_rate=1e-2,
        dataset_configs=[
            DistillationDatasetConfig(
                dataset_builder=GivenPromptsBuilder(model_path=str(tiny_model_path)),
                teacher_config=TeacherConfig(base_model=str(teacher)),
                groups_per_batch=GROUPS,
            )
        ],
        model_name=str(tiny_model_path),
        recipe_name="roost_distill_test",
        renderer_name="qwen3",
        max_tokens=4,
        lora_rank=8,
        log_path=str(log_path),
        base_url=url,
        eval_every=0,
        save_every=0,
    )
    asyncio.run(train_on_policy.main(config))

    rows = [row for row in read_metrics(log_path) if "teacher_kl" in row]
    assert [row["progress/batch"] for row in rows] == list(range(STEPS))
    kls = [row["teacher_kl"] for row in rows]
    assert all(math.isfinite(kl) for kl in kls), kls
    checkpoints = [json.loads(line) for line in (log_path / "checkpoints.jsonl").read_text().splitlines()]
    assert checkpoints[-1]["name"] == "final"

    with TrajectoryReader(store) as reader:
        (teacher_session,) = reader.sessions(group_id=f"base:{teacher}")
        scored = {tuple(c.prompt_ids): c.response["prompt_logprobs"] for c in reader.calls(teacher_session.session_id)}
        students = [s for s in reader.sessions() if s.task["base_model"] == str(tiny_model_path)]
        sampled = {s.metadata["weight_version"]: reader.calls(s.session_id) for s in students}
    # The student's sampler of step i has the weights of i optim_steps: every step trained.
    assert sorted(sampled, key=int) == [str(i) for i in range(STEPS)]
    assert len(scored) == STEPS * GROUPS * GROUP_SIZE
    for step, kl in enumerate(kls):
        # The loop's reverse KL, from what the server recorded: the student's sampled logprobs less
        # the teacher's prompt logprobs of the same tokens, over every sampled token of the step.
        gaps = []
        for call in sampled[str(step)]:
            sequence = (*call.prompt_ids, *call.sampled_ids)
            teacher_logprobs = scored[sequence][len(call.prompt_ids) :]
            gaps += [s - t for s, t in zip(call.sampled_logprobs, teacher_logprobs)]
        assert len(sampled[str(step)]) == GROUPS * GROUP_SIZE
        assert kl == pytest.approx(sum(gaps) / len(gaps), abs=1e-4)
        if step == 0:
            # The student is still its base model here: had the student scored, the gaps would be ~0.
            assert max(abs(gap) for gap in gaps) > 0.1, gaps
