"""The Megatron trainer on `tiny-vl` (Qwen3-VL): the GPTModel language model with the checkpoint's
frozen vision tower beside it. A GRPO-like group sharing an image prompt, tree-packed (the image
once) and flat, gives transformers' `Qwen3VLForConditionalGeneration` logprobs (fp32, 1e-4), the
tree the flat layout's (1e-5); a training step moves the language model, not the tower, and the
exported checkpoint loads as Qwen3-VL and scores as the trainer does. Image tokens without their
pixels are refused, in packing and in the forward. The RL trainer's `MegatronPolicy` does the same
with samples that name their images by sha256, given the images' bytes (`use_images`)."""

from __future__ import annotations

import pytest
import torch

from roost.rollout.engine.model_spec import ModelSpec
from roost.rollout.engine.rope import inverse_frequencies
from roost.rollout.engine.tiny_model import tiny_model_dir
from roost.tests.trainer.vision_batch import image_group, policy_samples
from roost.tests.vision_helpers import transformers_logprobs
from roost.trainer import hf_checkpoint
from roost.trainer.megatron import convert
from roost.trainer.megatron.model import build_gpt_model, scored_logprobs, transformer_config
from roost.trainer.prefix_tree import flat_microbatch, tree_microbatch


@pytest.fixture(scope="module")
def vl_path():
    return tiny_model_dir(variant="tiny-vl")


@pytest.fixture(scope="module")
def spec(vl_path):
    return ModelSpec.from_folder(vl_path)


@pytest.fixture(scope="module")
def reference(vl_path):
    from transformers import Qwen3VLForConditionalGeneration

    return Qwen3VLForConditionalGeneration.from_pretrained(vl_path, dtype=torch.float32).eval()


def load_policy(spec, folder):
    model = build_gpt_model(spec, transformer_config(spec), "sdpa")
    convert.load_into(model, convert.hf_to_megatron(hf_checkpoint.read_weights(folder), spec))
    return model


@pytest.fixture(scope="module")
def group(vl_path):
    return image_group(vl_path)


def layouts(group):
    sequences, scored, keys, positions, images, _ = group
    index = list(range(len(sequences)))
    tree = tree_microbatch(sequences, scored, index, keys=keys, mrope_positions=positions, images=images)
    flat = flat_microbatch(sequences, scored, index, keys=keys, mrope_positions=positions, images=images)
    return tree, flat


def test_tree_and_flat_logprobs_equal_transformers(megatron_world, spec, vl_path, reference, group):
    model = load_policy(spec, vl_path)
    inv_freq = inverse_frequencies(spec)
    tree, flat = layouts(group)
    assert tree.num_tokens < flat.num_tokens  # the image prompt packed once for three samples
    assert list(tree.images.pixels) == ["sha-1", "sha-2"]  # each image encoded once
    encoded = []
    hook = model.vision.tower.register_forward_hook(lambda _m, args, _o: encoded.append(args[0].shape[0]))
    with torch.no_grad():
        in_tree = tree.sample_logprobs(scored_logprobs(model, tree, inv_freq))
        in_flat = flat.sample_logprobs(scored_logprobs(model, flat, inv_freq))
    hook.remove()
    patches = sum(p.pixel_values.shape[0] for p in group[4].values())
    assert encoded == [patches, patches]  # one tower run a forward, over the two distinct images
    sequences, scored, *_, pictures = group
    for a, b, sequence, positions, picture in zip(in_tree, in_flat, sequences, scored, pictures):
        want = transformers_logprobs(reference, vl_path, sequence, positions, picture)
        assert (a - want).abs().max() <= 1e-4
        assert (b - want).abs().max() <= 1e-4
        assert (a - b).abs().max() <= 1e-5
    assert (in_tree[0] - in_tree[3]).abs().max() > 1e-3  # same ids, another image: other logprobs


def test_image_tokens_without_their_pixels_are_refused(megatron_world, spec, vl_path, group):
    from roost.trainer.prefix_tree import PackingError

    sequences, scored, keys, positions, images, _ = group
    with pytest.raises(PackingError, match="whose pixels were not given"):
        tree_microbatch(sequences, scored, range(4), keys=keys, images={"sha-1": images["sha-1"]})
    model = load_policy(spec, vl_path)
    bare = tree_microbatch(sequences, scored, range(4), keys=keys, mrope_positions=positions)
    with pytest.raises(ValueError, match="image placeholder tokens .* but no images"):
        scored_logprobs(model, bare, inverse_frequencies(spec))


def test_a_train_step_moves_the_language_model_and_exports_qwen3_vl(megatron_world, spec, vl_path, group, tmp_path):
    from transformers import Qwen3VLForConditionalGeneration

    model = load_policy(spec, vl_path)
    inv_freq = inverse_frequencies(spec)
    tree, _ = layouts(group)
    before = convert.model_state(model)
    trained = [p for p in model.parameters() if p.requires_grad]
    assert trained and not any(p.requires_grad for p in model.vision.parameters())  # the tower is frozen
    optimizer = torch.optim.Adam(trained, lr=1e-2)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])
    logprobs = tree.sample_logprobs(scored_logprobs(model, tree, inv_freq))
    loss = -sum(a * lp.sum() for a, lp in zip(advantages, logprobs)) / sum(len(lp) for lp in logprobs)
    loss.backward()
    optimizer.step()
    after = convert.model_state(model)
    assert not torch.equal(before["embedding.word_embeddings.weight"], after["embedding.word_embeddings.weight"])
    assert all(torch.equal(before[n], after[n]) for n in after if n.startswith("vision."))

    hf = convert.megatron_to_hf([after], spec)
    assert set(hf) == set(hf_checkpoint.read_weights(vl_path))  # Qwen3-VL's names, the tower included
    folder = hf_checkpoint.write_checkpoint(hf, vl_path, tmp_path / "step1")
    exported = Qwen3VLForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        ours = tree.sample_logprobs(scored_logprobs(model, tree, inv_freq))
    sequences, scored, *_, pictures = group
    for lp, sequence, positions, picture in zip(ours, sequences, scored, pictures):
        assert (lp - transformers_logprobs(exported, folder, sequence, positions, picture)).abs().max() <= 1e-4


@pytest.mark.parametrize("frozen", [True, False], ids=["tower-frozen", "tower-trained"])
def test_megatron_policy_trains_samples_with_their_images(
    megatron_world, spec, vl_path, reference, group, tmp_path, frozen
):
    """The RL trainer's policy: samples name their images by sha256, the images' bytes (as the store
    holds them) are handed to it, and its tree logprobs, step and export work as above; with
    `freeze_vision_tower` off the step trains the tower too, and the export carries it."""
    from transformers import Qwen3VLForConditionalGeneration

    from roost.trainer.advantages import AdvantageConfig, Group, compute_advantages
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig
    from roost.trainer.prefix_tree import PackingError

    sequences, scored, *_, pictures = group
    samples, images = policy_samples(group)
    config = TrainConfig(checkpoint=str(vl_path), token_budget=1024, lr=1e-2, freeze_vision_tower=frozen)
    policy = MegatronPolicy(config)
    with pytest.raises(PackingError, match="was not given to the trainer"):
        policy.logprobs(samples)
    policy.use_images(images)
    ours = policy.logprobs(samples)
    for lp, sequence, positions, picture in zip(ours, sequences, scored, pictures):
        assert (lp - transformers_logprobs(reference, vl_path, sequence, positions, picture)).abs().max() <= 1e-4

    scored_batch, _ = compute_advantages([Group("g", samples)], AdvantageConfig())
    policy.train_step(scored_batch)
    start, now = hf_checkpoint.read_weights(vl_path), policy.hf_state()
    tower = [n for n in start if n.startswith("model.visual.")]
    assert all(torch.equal(start[n], now[n]) for n in tower) == frozen
    folder = policy.export_hf(tmp_path / "policy")
    exported = Qwen3VLForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
    after = policy.logprobs(samples)
    assert (after[0] - ours[0]).abs().max() > 1e-4  # the step moved the policy
    for lp, sequence, positions, picture in zip(after, sequences, scored, pictures):
        assert (lp - transformers_logprobs(exported, folder, sequence, positions, picture)).abs().max() <= 1e-4
