"""The trainer's interleaved multimodal RoPE (Qwen3-VL) against transformers' own rotary:
same angles from the same 3-D position ids, and text tokens turn as under 1-D RoPE; a prefix
tree packs a shared image once, keeps images with equal placeholder ids apart, and carries
each path's 3-D positions."""

from __future__ import annotations

import torch

from roost.trainer.megatron.model import mrope_rotary_embedding, rotary_embedding

SECTION = (6, 5, 5)  # tiny-vl's: head_dim 32, 16 frequencies


def hf_rotary():
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding

    config = Qwen3VLTextConfig(
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 1e6,
            "mrope_section": list(SECTION),
            "mrope_interleaved": True,
        },
    )
    return Qwen3VLTextRotaryEmbedding(config)


def test_mrope_angles_equal_transformers():
    rotary = hf_rotary()
    torch.manual_seed(0)
    positions = torch.randint(0, 300, (3, 2, 17))
    cos, sin = rotary(torch.zeros(1, dtype=torch.float32), positions)  # [b, s, head_dim]
    angles = mrope_rotary_embedding(rotary.inv_freq, positions, SECTION)  # [s, b, 1, head_dim]
    ours = angles[:, :, 0].transpose(0, 1)
    torch.testing.assert_close(ours.cos(), cos, rtol=0, atol=1e-6)
    torch.testing.assert_close(ours.sin(), sin, rtol=0, atol=1e-6)


def test_text_positions_turn_as_one_dimensional_rope():
    rotary = hf_rotary()
    text = torch.arange(11)[None].expand(2, -1)
    three = text[None].expand(3, -1, -1)
    assert torch.equal(mrope_rotary_embedding(rotary.inv_freq, three, SECTION), rotary_embedding(rotary.inv_freq, text))


def image_sample(image: str, reply: list[int]):
    """A sample with a 4-token image (a 4 x 4 patch grid) after 2 text tokens, then `reply`:
    its ids, keys and 3-D positions."""
    from roost.rollout.vision.mrope import mrope_positions

    pad = 151655
    ids = [1, 2, pad, pad, pad, pad, *reply]
    keys: list[object] = [1, 2, *[(image, k) for k in range(4)], *reply]
    return ids, keys, mrope_positions(ids, pad, [(1, 4, 4)], spatial_merge=2)


def test_tree_packs_a_shared_image_once_and_keeps_each_paths_positions():
    from roost.trainer.prefix_tree import tree_microbatch

    samples = [image_sample("a", [7, 8]), image_sample("a", [7, 9]), image_sample("b", [7, 8])]
    ids, keys, positions = zip(*samples)
    batch = tree_microbatch(ids, [[6, 7]] * 3, [0, 1, 2], keys=keys, mrope_positions=positions)
    # image a's prefix and its first reply token packed once; image b's tokens apart though its ids match
    assert batch.num_tokens == 2 + (4 + 1 + 2) + (4 + 2)
    assert batch.position_ids.shape == (3, 1, batch.num_tokens)
    for own, scores in zip(positions, batch.sample_scores):
        rows = batch.score_rows[scores]  # the rows scoring reply tokens 6 and 7 are tokens 5 and 6
        assert torch.equal(batch.position_ids[:, 0, rows], own[:, 5:7])
    assert len(batch.score_rows) == 5  # a's two samples share the entry that scores their 7


def test_positions_equal_transformers_get_rope_index():
    from transformers import Qwen3VLConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

    from roost.rollout.vision.mrope import mrope_positions

    config = Qwen3VLConfig(
        text_config=dict(vocab_size=256, hidden_size=64, num_hidden_layers=1, num_attention_heads=4, head_dim=32),
        vision_config=dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=64, out_hidden_size=64),
        image_token_id=250,
        vision_start_token_id=251,
        vision_end_token_id=252,
    )
    model = Qwen3VLModel(config)
    grids = [(1, 4, 6), (1, 2, 2)]  # 6 and 1 placeholder tokens after the 2 x 2 merge
    ids = [5, 6, 251, *[250] * 6, 252, 7, 8, 251, 250, 252, 9]
    ours = mrope_positions(ids, 250, grids, spatial_merge=2)
    input_ids = torch.tensor([ids])
    theirs, _ = model.get_rope_index(
        input_ids, mm_token_type_ids=(input_ids == 250).int(), image_grid_thw=torch.tensor(grids)
    )
    assert torch.equal(ours, theirs[:, 0])
    assert not torch.equal(ours[0], ours[1])  # the image rows and columns are not 1-D positions
