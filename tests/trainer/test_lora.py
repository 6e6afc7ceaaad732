"""LoRA on the Megatron policy against PEFT on the Hugging Face model: the same adapter gives the
same logprobs, a fresh one changes nothing, a LoRA step trains the adapters alone, and the merged
export computes what the adapted model does."""

from __future__ import annotations

import pytest
import torch

from roost.rollout.lora import KNOWN_TARGETS, LoraSpec, load_adapter
from roost.tests.trainer.trainer_fixtures import agentic_batch
from roost.trainer.advantages import Scored
from roost.trainer.losses import LossConfig

ALL = LoraSpec(rank=4, alpha=8.0, targets=tuple(sorted(KNOWN_TARGETS)))  # as PEFT writes them


def random_adapter(policy, seed: int = 7, scale: float = 0.05) -> dict[str, torch.Tensor]:
    """Nonzero A and B on every target, loaded into the policy; returned under PEFT's keys."""
    from roost.trainer.megatron import lora

    generator = torch.Generator().manual_seed(seed)
    fresh = lora.fresh_weights(policy.config.lora, policy.spec)
    weights = {k: torch.randn(v.shape, generator=generator) * scale for k, v in fresh.items()}
    lora.load_weights(
        policy.model, policy.lora_hosts, weights, tp_rank=policy.info.tp_rank, tp_size=policy.info.tp_size
    )
    return weights


def hf_logprobs(model, samples) -> list[torch.Tensor]:
    out = []
    for sample in samples:
        pos = [i for i, m in enumerate(sample.loss_mask) if m]
        with torch.no_grad():
            logits = model(torch.tensor([sample.tokens])).logits[0].float()
        out.append(torch.log_softmax(logits, -1)[torch.tensor(pos) - 1, torch.tensor([sample.tokens[i] for i in pos])])
    return out


def worst(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def hf_base(tiny_model_path):
    from transformers import AutoModelForCausalLM

    return lambda: AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()


def policy_with(tiny_model_path, spec: LoraSpec | None, **config):
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    return MegatronPolicy(TrainConfig(checkpoint=str(tiny_model_path), lora=spec, token_budget=256, **config))


def test_lora_logprobs_equal_peft_loading_the_adapter_roost_saved(megatron_world, tiny_model_path, hf_base, tmp_path):
    from peft import PeftModel

    policy = policy_with(tiny_model_path, ALL)
    weights = random_adapter(policy)
    folder = policy.save_adapter(tmp_path / "adapter")
    saved = load_adapter(folder)
    assert saved.spec == ALL and saved.weights.keys() == weights.keys()
    assert all(torch.equal(saved.weights[k], v) for k, v in weights.items())  # TP=1 gathers nothing

    samples = agentic_batch()
    peft = PeftModel.from_pretrained(hf_base(), str(folder)).eval()
    lp = policy.logprobs(samples)
    assert worst(lp, hf_logprobs(peft, samples)) <= 1e-5
    assert worst(lp, hf_logprobs(hf_base(), samples)) > 1e-3  # the adapter on every target does change them


def test_targets_that_fill_part_of_a_fused_layer_equal_peft(megatron_world, tiny_model_path, hf_base, tmp_path):
    from peft import PeftModel

    # q and v of linear_qkv, up of linear_fc1: the rows of k and gate get nothing
    policy = policy_with(tiny_model_path, LoraSpec(rank=3, alpha=5.0, targets=("q_proj", "up_proj", "v_proj")))
    random_adapter(policy, seed=3)
    peft = PeftModel.from_pretrained(hf_base(), str(policy.save_adapter(tmp_path / "adapter"))).eval()
    samples = agentic_batch()
    assert worst(policy.logprobs(samples), hf_logprobs(peft, samples)) <= 1e-5


def test_a_fresh_adapter_is_peft_initialised_and_changes_nothing(megatron_world, tiny_model_path, hf_base):
    from peft import LoraConfig, get_peft_model

    policy = policy_with(tiny_model_path, LoraSpec(rank=8, alpha=16.0, targets=("q_proj", "v_proj", "down_proj")))
    state = policy.adapter_state()
    peft = get_peft_model(hf_base(), LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"]))
    expected = {k.replace(".default", ""): v for k, v in peft.state_dict().items() if "lora_" in k}
    assert state.keys() == expected.keys()
    for key, tensor in state.items():
        assert tensor.shape == expected[key].shape, key
        if ".lora_B." in key:
            assert not tensor.any(), key
        else:  # kaiming-uniform, a = sqrt(5): bound 1 / sqrt(fan_in)
            bound = 1 / tensor.shape[1] ** 0.5
            assert tensor.abs().max() <= bound and tensor.std() > bound / 3, key
    samples = agentic_batch()
    assert worst(policy.logprobs(samples), hf_logprobs(hf_base(), samples)) <= 1e-5


def test_a_lora_sft_step_trains_only_the_adapters_and_the_merged_export_matches(
    megatron_world, tiny_model_path, hf_base, tmp_path
):
    from transformers import AutoModelForCausalLM

    from roost.trainer.megatron import convert, lora

    policy = policy_with(tiny_model_path, ALL, lr=1e-2)
    random_adapter(policy)
    policy.config.loss = LossConfig(kind="sft")
    trainable = {id(p) for p in policy.model.parameters() if p.requires_grad}
    in_optimizer = [p for group in policy.optimizer.param_groups for p in group["params"]]
    adapters = {n: p for n, p in policy.model.module.named_parameters() if lora.is_adapter_name(n)}
    assert trainable == {id(p) for p in adapters.values()}
    assert sum(p.numel() for p in in_optimizer) == sum(p.numel() for p in adapters.values())

    base = {k: v for k, v in convert.model_state(policy.model).items() if not lora.is_adapter_name(k)}
    adapter = policy.adapter_state()
    batch = [Scored(s, [0.0] * len(s.tokens)) for s in agentic_batch()]
    first = policy.train_step(batch)
    second = policy.train_step(batch)
    assert first.updated and second.updated
    assert second.extra["neg_logprob"] < first.extra["neg_logprob"]
    after = convert.model_state(policy.model)
    assert all(torch.equal(after[k], v) for k, v in base.items())  # the base is bitwise unchanged
    assert all(not torch.equal(policy.adapter_state()[k], v) for k, v in adapter.items() if ".lora_A." in k)

    merged = AutoModelForCausalLM.from_pretrained(policy.export_hf(tmp_path / "merged"), dtype=torch.float32).eval()
    assert not merged.config.tie_word_embeddings  # the adapted unembedding is its own weight
    samples = agentic_batch()
    assert worst(policy.logprobs(samples), hf_logprobs(merged, samples)) <= 1e-5


def test_the_policy_resumes_from_a_saved_adapter(megatron_world, tiny_model_path, tmp_path):
    from roost.rollout.lora import AdapterError

    policy = policy_with(tiny_model_path, ALL)
    weights = random_adapter(policy)
    folder = policy.save_adapter(tmp_path / "adapter")
    resumed = policy_with(tiny_model_path, ALL, adapter=str(folder))
    assert all(torch.equal(resumed.adapter_state()[k], v) for k, v in weights.items())
    samples = agentic_batch()
    assert worst(resumed.logprobs(samples), policy.logprobs(samples)) == 0.0
    with pytest.raises(AdapterError, match="rank 4.*asks rank 2"):
        policy_with(tiny_model_path, LoraSpec(rank=2, alpha=8.0, targets=KNOWN_TARGETS), adapter=str(folder))


@pytest.mark.parametrize("kind", ["ppo", "grpo", "gspo"])
def test_every_rl_loss_trains_the_adapters_alone(megatron_world, tiny_model_path, kind):
    from roost.tests.trainer.trainer_fixtures import grpo_batch
    from roost.trainer.advantages import AdvantageConfig, Group, compute_advantages
    from roost.trainer.megatron import convert, lora

    policy = policy_with(tiny_model_path, LoraSpec(rank=2, alpha=4.0), lr=1e-2, loss=LossConfig(kind=kind))
    random_adapter(policy)
    base = {k: v for k, v in convert.model_state(policy.model).items() if not lora.is_adapter_name(k)}
    adapter = policy.adapter_state()
    batch = grpo_batch(groups=2, size=4)
    scored, _ = compute_advantages([Group("g0", batch[:4]), Group("g1", batch[4:])], AdvantageConfig())
    stats = policy.train_step(scored)
    assert stats.updated and stats.grad_norm > 0
    after = convert.model_state(policy.model)
    assert all(torch.equal(after[k], v) for k, v in base.items())
    assert any(not torch.equal(policy.adapter_state()[k], v) for k, v in adapter.items())


def test_adapter_dropout_applies_in_training_only(megatron_world, tiny_model_path, hf_base, tmp_path):
    from peft import PeftModel

    from roost.trainer.megatron.model import scored_logprobs

    policy = policy_with(tiny_model_path, LoraSpec(rank=4, alpha=8.0, dropout=0.5))
    random_adapter(policy, scale=0.2)
    samples = agentic_batch()
    # no-grad logprobs (the rollout side, old logprobs) see no dropout: PEFT's eval-mode forward
    peft = PeftModel.from_pretrained(hf_base(), str(policy.save_adapter(tmp_path / "adapter"))).eval()
    assert worst(policy.logprobs(samples), hf_logprobs(peft, samples)) <= 1e-5
    microbatch = policy.microbatches(samples)[0]
    first, second = (scored_logprobs(policy.model, microbatch, policy.inv_freq) for _ in range(2))
    assert float((first - second).abs().max()) > 1e-4  # a fresh mask on each training forward
