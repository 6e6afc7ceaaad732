"""tinker-cookbook's RL loop (`tinker_cookbook.rl.train.main`), unchanged, against a real
`roost tinker serve` on the tiny model, with an env the test defines through the cookbook's own
`Env` / `EnvGroupBuilder` / `RLDataset` / `RLDatasetBuilder`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import chz
import pytest
import tinker
from tinker_cookbook.rl.types import Env, EnvGroupBuilder, RLDataset, RLDatasetBuilder, StepResult

from .conftest import API_KEY, tinker_server
from .cookbook_runs import read_metrics

pytestmark = pytest.mark.slow

STEPS = 10


def rewarded_tokens(model_path: str) -> frozenset[int]:
    """The tokens whose (tied) embedding leans along one fixed random direction: about half the
    vocabulary. The tiny model samples nearly uniformly, so a set of a few tokens would never be hit;
    this one is, and turning the last hidden state towards the direction raises all of it at once,
    which a few policy-gradient steps can do (checked: with cross_entropy weighted by the advantages,
    the on-policy gradient of importance_sampling, the mean reward goes from about 0.51 to 0.67;
    the cookbook's loop here, 10 steps of 8 groups of 8, goes from ~0.51 to 0.75-1.0)."""
    import torch
    from safetensors.torch import load_file

    embeddings = load_file(f"{model_path}/model.safetensors")["model.embed_tokens.weight"]
    direction = torch.randn(embeddings.shape[1], generator=torch.Generator().manual_seed(0))
    return frozenset(torch.nonzero(embeddings @ direction > 0).flatten().tolist())


class LeaningTokensEnv(Env):
    """One turn: the prompt, then reward = the share of sampled tokens in the rewarded set."""

    def __init__(self, prompt: Sequence[int], rewarded: frozenset[int]):
        self.prompt = list(prompt)
        self.rewarded = rewarded

    async def initial_observation(self):
        return tinker.ModelInput.from_ints(self.prompt), []

    async def step(self, action, *, extra=None) -> StepResult:
        reward = sum(token in self.rewarded for token in action) / max(len(action), 1)
        return StepResult(
            reward=reward,
            episode_done=True,
            next_observation=tinker.ModelInput.from_ints([]),
            next_stop_condition=[],
        )


class LeaningTokensGroup(EnvGroupBuilder):
    def __init__(self, prompt: Sequence[int], rewarded: frozenset[int], group_size: int):
        self.prompt = tuple(prompt)
        self.rewarded = rewarded
        self.group_size = group_size

    async def make_envs(self) -> Sequence[Env]:
        return [LeaningTokensEnv(self.prompt, self.rewarded) for _ in range(self.group_size)]


class LeaningTokensDataset(RLDataset):
    """The same groups every step: one prompt, the same rewarded set."""

    def __init__(self, prompt: Sequence[int], rewarded: frozenset[int], groups: int, group_size: int):
        self.builders = [LeaningTokensGroup(prompt, rewarded, group_size) for _ in range(groups)]

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        return self.builders

    def __len__(self) -> int:
        return STEPS


@chz.chz
class LeaningTokensDatasetBuilder(RLDatasetBuilder):
    model_path: str
    groups: int = 8
    group_size: int = 8

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": "Say a word."}], add_generation_prompt=True, tokenize=False
        )
        rewarded = rewarded_tokens(self.model_path)
        return LeaningTokensDataset(tokenizer.encode(prompt), rewarded, self.groups, self.group_size), None


@pytest.fixture(scope="module")
def model_url(tmp_path_factory, tiny_model_path: Path):
    with tinker_server(tmp_path_factory.mktemp("cookbook-rl"), "--base-model", str(tiny_model_path)) as url:
        yield url


def test_the_cookbook_rl_loop_runs_and_its_reward_rises(model_url, tiny_model_path, tmp_path, monkeypatch):
    from tinker_cookbook.rl import train

    monkeypatch.setenv("TINKER_API_KEY", API_KEY)
    log_path = tmp_path / "run"
    config = train.Config(
        learning_rate=3e-2,
        dataset_builder=LeaningTokensDatasetBuilder(model_path=str(tiny_model_path)),
        model_name=str(tiny_model_path),
        recipe_name="roost_rl_test",
        renderer_name="qwen3",
        max_tokens=8,
        log_path=str(log_path),
        eval_every=0,
        save_every=0,
        lora_rank=8,
        base_url=model_url,
    )
    asyncio.run(train.main(config))

    rewards = [row["env/all/reward/total"] for row in read_metrics(log_path) if "env/all/reward/total" in row]
    assert len(rewards) == STEPS
    # A rise is a trend over the steps and a gain of the last three over the first three. A step's
    # mean over 64 samples moves by ~0.03 alone (3-step means: ~0.025 apart by chance). Seen here,
    # three runs: the first three steps' mean ~0.51, the last three's 0.70 to 0.97; CI once saw
    # a slower run, 0.49 rising steadily to 0.53-0.56 (+0.04); a busy run here rose late and
    # noisily (0.50, 0.48, 0.54, 0.42, 0.56, 0.52, 0.55, 0.48, 0.79, 0.71: +0.15, Kendall's tau
    # 0.38 but the least-squares slope's one-sided p 0.016). The trend is that slope's p below
    # 0.05: rewards that do not rise (a step's noise of 0.03 around a constant) pass both checks
    # 4% of the time; with 4 groups and 8 steps the rise was within the noise (0.53 falling to 0.49).
    from scipy.stats import linregress

    gain = sum(rewards[-3:]) / 3 - sum(rewards[:3]) / 3
    trend = linregress(range(STEPS), rewards, alternative="greater").pvalue
    assert gain > 0.03 and trend < 0.05, (rewards, gain, trend)
