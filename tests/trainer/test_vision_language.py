"""The Megatron trainer on `tiny-vl` (Qwen3-VL): the GPTModel language model with the checkpoint's
frozen vision tower beside it. A GRPO-like group sharing an image prompt, tree-packed (the image
once) and flat, gives transformers' `Qwen3VLForConditionalGeneration` logprobs (fp32, 1e-4), the
tree the flat layout's (1e-5); a training step moves the language model, not the tower, and the
exported checkpoint loads as Qwen3-VL and scores as the trainer does. Image tokens without their
pixels are refused, in packing and in the forward. The RL trainer's `MegatronPolicy` does the same
with samples that name their images by sha256, given the images' bytes (`use_images`)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from roost.rollout.engine.model_spec import ModelSpec
from roost.rollout.engine.rope import inverse_frequencies
from roost.rollout.engine.tiny_model import tiny_model_dir
from roost.rollout.vision.mrope import mrope_positions
from roost.rollout.vision.placeholders import expand_image_pads, image_token_counts
from roost.rollout.vision.processor import load_processor
from roost.tests.vision_helpers import IMAGE_PAD, transformers_logprobs
from roost.trainer import hf_checkpoint
from roost.trainer.megatron import convert
from roost.trainer.megatron.model import build_gpt_model, scored_logprobs, transformer_config
from roost.trainer.prefix_tree import ImagePixels, flat_microbatch, tree_microbatch


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


def noise_image(seed: int) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (96, 128, 3), dtype=np.uint8))


@pytest.fixture(scope="module")
def group(vl_path, spec):
    """Three replies to one image question, and a fourth sample asking about another image with
    the same ids: (sequences, scored positions, keys, mrope positions, images by sha, each sample's
    image)."""
    processor = load_processor(vl_path)
    pictures = {f"sha-{seed}": noise_image(seed) for seed in (1, 2)}
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    counts = image_token_counts(processor, [pictures["sha-1"]])
    prompt = expand_image_pads(processor.tokenizer(text)["input_ids"], IMAGE_PAD, counts)
    replies = [[785, 2168, 374, 13], [785, 2168, 5868], [32, 6802, 13, 151645], [785, 2168, 374, 13]]
    seen = ["sha-1", "sha-1", "sha-1", "sha-2"]
    images = {}
    for sha, picture in pictures.items():
        out = processor.image_processor(images=[picture], return_tensors="pt")
        images[sha] = ImagePixels(out["pixel_values"], tuple(int(v) for v in out["image_grid_thw"][0]))
    sequences, keys, positions = [], [], []
    for reply, sha in zip(replies, seen):
        ids = prompt + reply
        k = 0
        own_keys: list[object] = []
        for token in ids:
            own_keys.append((sha, k) if token == IMAGE_PAD else token)
            k += token == IMAGE_PAD
        sequences.append(ids)
        keys.append(own_keys)
        positions.append(mrope_positions(ids, IMAGE_PAD, [images[sha].grid], spec.vision.spatial_merge_size))
    scored = [list(range(len(prompt), len(s))) for s in sequences]
    return sequences, scored, keys, positions, images, [pictures[sha] for sha in seen]


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


def png_bytes(picture: Image.Image) -> bytes:
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


def test_megatron_policy_trains_samples_with_their_images(megatron_world, spec, vl_path, reference, group, tmp_path):
    """The RL trainer's policy: samples name their images by sha256, the images' bytes (as the store
    holds them) are handed to it, and its tree logprobs, step and export work as above."""
    from transformers import Qwen3VLForConditionalGeneration

    from roost.rollout.store.samples import Sample
    from roost.rollout.vision.images import content_address
    from roost.trainer.advantages import AdvantageConfig, Group, compute_advantages
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig
    from roost.trainer.prefix_tree import PackingError

    sequences, scored, *_, pictures = group
    data = [png_bytes(picture) for picture in pictures]
    samples = []
    for k, (sequence, positions, raw) in enumerate(zip(sequences, scored, data)):
        prompt, reply = sequence[: positions[0]], sequence[positions[0] :]
        sample = Sample.from_turns(
            [(prompt, reply, [-1.0] * len(reply))], session_id=f"s{k}", group_id="g", reward=float(k % 2)
        )
        sample.images = [content_address(raw)]
        samples.append(sample)
    policy = MegatronPolicy(TrainConfig(checkpoint=str(vl_path), token_budget=1024, lr=1e-2))
    with pytest.raises(PackingError, match="was not given to the trainer"):
        policy.logprobs(samples)
    policy.use_images({content_address(raw): raw for raw in data})
    ours = policy.logprobs(samples)
    for lp, sequence, positions, picture in zip(ours, sequences, scored, pictures):
        assert (lp - transformers_logprobs(reference, vl_path, sequence, positions, picture)).abs().max() <= 1e-4

    scored_batch, _ = compute_advantages([Group("g", samples)], AdvantageConfig())
    policy.train_step(scored_batch)
    start, now = hf_checkpoint.read_weights(vl_path), policy.hf_state()
    assert all(torch.equal(start[n], now[n]) for n in start if n.startswith("model.visual."))  # frozen
    folder = policy.export_hf(tmp_path / "policy")
    exported = Qwen3VLForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
    after = policy.logprobs(samples)
    assert (after[0] - ours[0]).abs().max() > 1e-4  # the step moved the policy
    for lp, sequence, positions, picture in zip(after, sequences, scored, pictures):
        assert (lp - transformers_logprobs(exported, folder, sequence, positions, picture)).abs().max() <= 1e-4
