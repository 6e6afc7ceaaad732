"""PPO's trained critic: the value head's values on a packed prefix tree equal each sample's run
alone (fp32, ≤ 1e-5); GAE over the trainer's values matches the textbook recursion over the
sampled tokens; the clipped value loss matches numbers worked by hand; critic-only steps on a
fixed batch bring the value loss down and leave the policy as it was; the head's checkpoint
round-trips, and one of another shape (or none) is refused."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from roost.rollout.engine.model_spec import ModelSpec
from roost.rollout.engine.rope import inverse_frequencies
from roost.rollout.store.samples import Sample
from roost.tests.trainer.trainer_fixtures import agentic_batch, grpo_batch
from roost.trainer import hf_checkpoint
from roost.trainer.advantages import AdvantageConfig, EstimatorConfig, Group, gae
from roost.trainer.critic import critic_advantages
from roost.trainer.losses import value_losses
from roost.trainer.megatron import convert
from roost.trainer.megatron.critic import CriticError, ValueHead
from roost.trainer.megatron.model import build_gpt_model, scored_hidden, transformer_config
from roost.trainer.prefix_tree import build_microbatches, flat_microbatch
from roost.trainer.recipe import CriticSection

BATCHES = {"grpo": lambda: grpo_batch(), "agentic": lambda: agentic_batch()}


def sampled(sample: Sample) -> list[int]:
    return [i for i, m in enumerate(sample.loss_mask) if m]


@pytest.fixture(scope="module")
def tiny(megatron_world, tiny_model_path):
    spec = ModelSpec.from_folder(tiny_model_path)
    model = build_gpt_model(spec, transformer_config(spec), "sdpa")
    convert.load_into(model, convert.hf_to_megatron(hf_checkpoint.read_weights(tiny_model_path), spec))
    head = ValueHead(spec.hidden_size, lr=1e-3)
    torch.nn.init.normal_(head.linear.weight, generator=torch.Generator().manual_seed(0))  # zeros would agree anyway
    return model, inverse_frequencies(spec), head


@pytest.mark.parametrize("kind", sorted(BATCHES))
def test_values_on_the_packed_tree_equal_each_sample_run_alone(tiny, kind):
    model, inv_freq, head = tiny
    samples = BATCHES[kind]()
    positions = [sampled(s) for s in samples]
    tree = {}
    with torch.no_grad():
        mbs = build_microbatches([s.tokens for s in samples], positions, [s.group_id for s in samples], 4096)
        for mb in mbs:
            tree.update(zip(mb.sample_index, mb.sample_logprobs(head(scored_hidden(model, mb, inv_freq)))))
        alone = [
            head(scored_hidden(model, flat_microbatch([s.tokens], [p], [i]), inv_freq))
            for i, (s, p) in enumerate(zip(samples, positions))
        ]
    assert sum(mb.num_tokens for mb in mbs) < sum(len(s) for s in samples)  # something was shared
    assert float(torch.cat(alone).abs().max()) > 1e-2  # values, not zeros
    worst = max(float((tree[i] - alone[i]).abs().max()) for i in range(len(samples)))
    assert worst <= 1e-5


def multi_turn_sample() -> Sample:
    """Three turns with context tokens between them, a step reward on the second call."""
    turns = [([1, 2, 3], [10, 11], [-0.1, -0.2]), ([4, 5], [12, 13, 14], [-0.3] * 3), ([6], [15], [-0.4])]
    sample = Sample.from_turns(turns, session_id="s", group_id="g", reward=2.0)
    calls = list(sample.calls)
    calls[1] = dataclasses.replace(calls[1], reward=-0.5)
    return dataclasses.replace(sample, calls=type(sample.calls)(calls))


def textbook_gae(rewards, values, gamma, lam):
    """δ_t = r_t + γ V_{t+1} − V_t, A_t = δ_t + γλ A_{t+1} over the steps, V after the last = 0."""
    advantages, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        next_value = values[t + 1] if t + 1 < len(rewards) else 0.0
        running = rewards[t] + gamma * next_value - values[t] + gamma * lam * running
        advantages[t] = running
    return advantages


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 0.95), (0.9, 0.8), (0.99, 1.0)])
def test_gae_over_the_critics_values_is_the_textbook_recursion_over_sampled_tokens(gamma, lam):
    sample = multi_turn_sample()
    steps = sampled(sample)
    assert steps == [3, 4, 7, 8, 9, 11]  # context tokens between the turns are no steps
    # a context token's value must not matter: give them values GAE would be wrong to read
    values = [100.0 + i if not m else 0.1 * i for i, m in enumerate(sample.loss_mask)]
    # step reward on the second call's last token, the episode's reward on the last sampled token
    rewards = [0.0, 0.0, 0.0, 0.0, -0.5, 2.0]
    expected = textbook_gae(rewards, [values[i] for i in steps], gamma, lam)

    config = AdvantageConfig(EstimatorConfig("gae", {"gamma": gamma, "lam": lam}))
    scored, _ = critic_advantages([Group("g", [sample])], config, lambda samples: [values for _ in samples])
    (item,) = scored
    assert [item.advantages[i] for i in steps] == pytest.approx(expected, abs=1e-12)
    assert all(item.advantages[i] == 0.0 for i, m in enumerate(sample.loss_mask) if not m)
    assert [item.returns[i] for i in steps] == pytest.approx([a + values[i] for a, i in zip(expected, steps)])
    assert item.values == values
    # the estimator the loop fills is the one a user calls with their own critic
    direct = gae(Group("g", [sample]), critic=lambda samples: [values], gamma=gamma, lam=lam)[0]
    assert [direct[i] for i in steps] == pytest.approx(expected, abs=1e-12)


def test_clipped_value_loss_matches_hand_computed_numbers():
    values = torch.tensor([1.0, 0.0, 0.5, -1.0])
    old = torch.tensor([0.5, 0.5, 0.5, 0.0])
    returns = torch.tensor([2.0, 1.0, 0.0, -1.0])
    losses, clipped = value_losses(values, old, returns, clip=0.2)
    # token 0: V moved +0.5, clipped to 0.7: max((1-2)², (0.7-2)²)/2 = max(1, 1.69)/2 = 0.845
    # token 1: V moved -0.5, clipped to 0.3: max((0-1)², (0.3-1)²)/2 = max(1, 0.49)/2 = 0.5
    # token 2: V unmoved: (0.5-0)²/2 = 0.125
    # token 3: V moved -1 onto its return, clipped to -0.2: max(0, 0.64)/2 = 0.32
    assert losses.tolist() == pytest.approx([0.845, 0.5, 0.125, 0.32])
    assert clipped.tolist() == [True, False, False, True]
    plain, none_clipped = value_losses(values, old, returns, clip=None)
    assert plain.tolist() == pytest.approx([0.5, 0.5, 0.125, 0.0]) and not none_clipped.any()


@pytest.fixture(scope="module")
def policy(megatron_world, tiny_model_path):
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    return MegatronPolicy(
        TrainConfig(checkpoint=str(tiny_model_path), lr=1e-3, token_budget=256, critic=CriticSection(lr=1e-2))
    )


@pytest.mark.parametrize("value_clip", [0.2, None])
def test_critic_only_steps_on_a_fixed_batch_bring_the_value_loss_down(policy, value_clip):
    policy.config.critic = CriticSection(lr=1e-2, value_clip=value_clip)
    policy.critic = ValueHead(policy.spec.hidden_size, lr=1e-2)
    samples = grpo_batch(groups=2, size=2, prompt=12, answer=6)
    groups = [Group(g, [s for s in samples if s.group_id == g]) for g in ("g0", "g1")]
    scored, _ = critic_advantages(groups, AdvantageConfig(EstimatorConfig("gae")), policy.values)
    assert all(v == 0.0 for item in scored for v in item.values)  # a fresh head: zero everywhere
    before = {k: v.clone() for k, v in policy.hf_state().items()}
    losses = []
    for _ in range(5):
        stats = policy.train_step(scored, update_policy=False)
        losses.append(stats.extra["value_loss"])
        assert not stats.updated and stats.extra["value_tokens"] == sum(s.num_sampled for s in samples)
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    # clipped, a value earns nothing beyond 0.2 from the values the advantages came from
    assert losses[-1] < (0.85 if value_clip else 0.5) * losses[0], losses
    assert all(torch.equal(before[k], v) for k, v in policy.hf_state().items())  # the policy did not move
    trained = policy.values(samples)
    assert any(v != 0.0 for sample, vs in zip(samples, trained) for v, m in zip(vs, sample.loss_mask) if m)
    assert all(v == 0.0 for sample, vs in zip(samples, trained) for v, m in zip(vs, sample.loss_mask) if not m)


def test_a_step_with_the_critic_updates_the_policy_as_a_step_without_one(policy, tiny_model_path):
    """The head reads the trunk detached: the value loss trains the head alone."""
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    without = MegatronPolicy(TrainConfig(checkpoint=str(tiny_model_path), lr=1e-3, token_budget=256))
    policy.critic = ValueHead(policy.spec.hidden_size, lr=1e-2)
    samples = grpo_batch(groups=1, size=4, prompt=12, answer=6)
    scored, _ = critic_advantages([Group("g0", samples)], AdvantageConfig(EstimatorConfig("gae")), policy.values)
    start = policy.hf_state()
    both, alone = policy.train_step(scored), without.train_step(scored)
    assert both.updated and alone.updated and both.extra["value_loss"] > 0 and "value_loss" not in alone.extra
    assert both.loss == pytest.approx(alone.loss, rel=1e-6)
    moved, reference = policy.hf_state(), without.hf_state()
    assert not torch.equal(moved["model.norm.weight"], start["model.norm.weight"])
    for name, tensor in reference.items():
        torch.testing.assert_close(moved[name], tensor, rtol=0, atol=1e-7, msg=name)
    assert float(policy.critic.linear.weight.detach().abs().sum()) > 0  # the head moved as well


def test_only_samples_a_gae_estimator_scored_train_the_critic(policy):
    """A multi-agent group, the planner on gae, the solver on grpo: GRPO's advantages are no
    returns of the critic's values, so the solver's samples carry none and train no value."""
    policy.critic = ValueHead(policy.spec.hidden_size, lr=1e-2)
    samples = agentic_batch()
    config = AdvantageConfig(EstimatorConfig("grpo"), {"planner": EstimatorConfig("gae")})
    scored, _ = critic_advantages([Group("agentic", samples)], config, policy.values)
    planner = [item for item in scored if item.sample.agent_id == "planner"]
    assert planner and all(item.returns is not None for item in planner)
    assert all(item.returns is None and item.values is None for item in scored if item not in planner)
    stats = policy.train_step(scored, update_policy=False)
    assert stats.extra["value_tokens"] == sum(item.sample.num_sampled for item in planner)


def test_the_value_head_round_trips_its_checkpoint_and_refuses_another_shape(policy, tmp_path):
    from roost.trainer.rl.trainer import TrainerRank

    rank = TrainerRank(0, 1, 1, None)
    rank.policy = policy
    torch.nn.init.constant_(policy.critic.linear.bias, 0.25)
    rank.save(str(tmp_path / "trainer"))
    torch.nn.init.zeros_(policy.critic.linear.bias)
    rank.load(str(tmp_path / "trainer"))
    assert float(policy.critic.linear.bias.detach()) == 0.25

    state = torch.load(tmp_path / "trainer" / "rank-0.pt", weights_only=False)
    with pytest.raises(CriticError, match="another model's critic"):
        ValueHead(policy.spec.hidden_size * 2, lr=1e-3).load_state_dict(state["critic"], "rank-0.pt")
    del state["critic"]
    torch.save(state, tmp_path / "trainer" / "rank-0.pt")
    with pytest.raises(CriticError, match="holds no value head"):
        rank.load(str(tmp_path / "trainer"))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm.advantage.name=my_credit:split"], "no estimator here is gae"),
        (["algorithm.advantage.options={critic: my.values:fn}"], "names its own critic option"),
    ],
)
def test_a_critic_the_recipe_cannot_use_is_refused_at_load(overrides, message):
    from pathlib import Path

    from roost.trainer.recipe import RecipeError, load_recipe

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "alfworld" / "ppo_critic.yaml"
    assert load_recipe(recipe).algorithm.critic.warmup_steps == 1
    with pytest.raises(RecipeError, match=message):
        load_recipe(recipe, overrides)
