"""The batched sampler draws from the distribution each row's settings define, reproducibly per seed.

Frequencies are checked with a chi-square test against the distribution written out from the
definitions (temperature, then top-k, top-p and min-p), for each setting and for a batch that
mixes them; a seeded request gives the same tokens alone and inside a batch of others.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
import torch
from scipy.stats import chisquare

from roost.rollout.engine.sampling import RowDraw, SamplingConfig, choose_tokens, counter_uniforms

LOGITS = torch.tensor([2.0, 1.5, 1.2, 1.0, 0.6, 0.3, 0.0, -0.4, -0.9, -1.5, -2.2, -3.0])
DRAWS = 40_000
SETTINGS = {
    "temperature 1": SamplingConfig(),
    "temperature 0.6": SamplingConfig(temperature=0.6),
    "temperature 1.7": SamplingConfig(temperature=1.7),
    "top-k 4": SamplingConfig(top_k=4),
    "top-p 0.7": SamplingConfig(top_p=0.7),
    "min-p 0.2": SamplingConfig(min_p=0.2),
    "all at once": SamplingConfig(temperature=0.8, top_k=6, top_p=0.9, min_p=0.05),
}


def expected_probs(config: SamplingConfig) -> torch.Tensor:
    """The target distribution, from the definitions, one step at a time."""
    scores = (LOGITS / config.temperature).double()
    order = scores.argsort(descending=True).tolist()
    dropped = set(order[config.top_k :]) if config.top_k > 0 else set()
    probs = softmax_without(scores, dropped)
    mass = 0.0
    for token in order:
        if mass > config.top_p:
            dropped.add(token)
        mass += probs[token].item()
    probs = softmax_without(scores, dropped)
    probs = probs.masked_fill(probs < config.min_p * probs.max(), 0.0)
    return probs / probs.sum()


def softmax_without(scores: torch.Tensor, dropped: set[int]) -> torch.Tensor:
    mask = torch.tensor([token in dropped for token in range(len(scores))])
    return torch.softmax(scores.masked_fill(mask, float("-inf")), 0)


def draw(configs: list[SamplingConfig], first_seed: int = 0) -> list[int]:
    logits = LOGITS.expand(len(configs), -1).clone()
    return choose_tokens(logits, configs, [RowDraw(first_seed + row, 0) for row in range(len(configs))])


def assert_follows(tokens: list[int], config: SamplingConfig) -> None:
    expected = expected_probs(config)
    counts = torch.bincount(torch.tensor(tokens), minlength=len(LOGITS)).double()
    support = expected > 0
    assert counts[~support].sum() == 0, f"tokens outside the support drawn: {counts.tolist()}"
    result = chisquare(counts[support].numpy(), (expected[support] * len(tokens)).numpy())
    assert result.pvalue > 1e-4, f"{config}: counts {counts.tolist()} vs {expected.tolist()} (p={result.pvalue:.2e})"


@pytest.mark.parametrize("name", list(SETTINGS))
def test_each_setting_samples_its_distribution(name):
    config = SETTINGS[name]
    assert_follows(draw([config] * DRAWS), config)


def test_a_batch_mixing_settings_samples_each_row_by_its_own():
    configs = list(SETTINGS.values()) * (DRAWS // 4)
    tokens = draw(configs, first_seed=10**9)
    for offset, config in enumerate(SETTINGS.values()):
        assert_follows(tokens[offset :: len(SETTINGS)], config)


def test_greedy_rows_take_the_argmax_beside_sampled_rows():
    configs = [SamplingConfig(temperature=0.0), SamplingConfig(), SamplingConfig(top_k=1)] * 50
    tokens = draw(configs)
    assert set(tokens[0::3]) == {0} and set(tokens[2::3]) == {0}
    assert len(set(tokens[1::3])) > 3


def test_uniforms_depend_on_seed_and_step_only():
    alone = counter_uniforms([RowDraw(seed=123, step=5)])
    batched = counter_uniforms([RowDraw(seed=7, step=0), RowDraw(seed=123, step=5), RowDraw(seed=123, step=6)])
    assert batched[1] == alone[0]
    assert len({alone.item(), batched[0].item(), batched[2].item()}) == 3


def test_uniforms_are_uniform():
    values = counter_uniforms([RowDraw(seed=seed, step=step) for seed in range(400) for step in range(250)])
    assert float(values.min()) > 0.0 and float(values.max()) < 1.0
    counts = torch.histc(values.float(), bins=50, min=0.0, max=1.0)
    assert chisquare(counts.numpy()).pvalue > 1e-4


async def test_a_seeded_request_samples_the_same_alone_and_in_a_batch(engine_url):
    def body(text: str, seed: int) -> dict:
        return {
            "text": text,
            "sampling_params": {"max_new_tokens": 24, "temperature": 1.0, "sampling_seed": seed, "ignore_eos": True},
        }

    async with httpx.AsyncClient(timeout=120) as client:

        async def generate(payload: dict) -> list[int]:
            resp = await client.post(f"{engine_url}/generate", json=payload)
            assert resp.status_code == 200, resp.text
            return resp.json()["output_ids"]

        alone = await generate(body("Once upon a time", 42))
        others = [body(f"Prompt number {i} says", 1000 + i) for i in range(7)]
        batched = await asyncio.gather(
            *map(generate, others[:3]), generate(body("Once upon a time", 42)), *map(generate, others[3:])
        )
    assert batched[3] == alone
    assert len({tuple(ids) for ids in batched}) == len(batched)
