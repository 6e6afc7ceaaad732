"""`tiny-vl` (Qwen3-VL architecture) and roost.rollout.vision: the checkpoint loads offline with
transformers' own classes, its processor renders images as Qwen3-VL's does, and roost's placeholder
expansion and image decoding agree with the processor and refuse bad payloads by name."""

from __future__ import annotations

import base64
import io
import json

import pytest
import torch
from PIL import Image

from roost.rollout.engine.tiny_model import TINY_VL_CONFIG, tiny_model_dir
from roost.rollout.vision.images import (
    ImageLimits,
    ImageRejected,
    content_address,
    decode_image_base64,
    decode_image_url,
)
from roost.rollout.vision.placeholders import (
    ImagePlaceholders,
    PlaceholderMismatch,
    expand_image_pads,
    image_pad_runs,
    image_token_counts,
)
from roost.rollout.vision.processor import load_processor
from roost.tests.vision_helpers import IMAGE_PAD


@pytest.fixture(scope="module")
def tiny_vl_path():
    return tiny_model_dir(variant="tiny-vl")


@pytest.fixture(scope="module")
def processor(tiny_vl_path):
    return load_processor(tiny_vl_path)


def _png(width: int, height: int, colour=(200, 30, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buffer, format="PNG")
    return buffer.getvalue()


def _data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def test_checkpoint_is_qwen3_vl_with_the_agreed_sizes(tiny_vl_path) -> None:
    from transformers import AutoModelForImageTextToText

    config = json.loads((tiny_vl_path / "config.json").read_text())
    assert config["architectures"] == ["Qwen3VLForConditionalGeneration"]
    text, vision = config["text_config"], config["vision_config"]
    assert (text["hidden_size"], text["head_dim"], text["num_hidden_layers"]) == (64, 32, 2)
    assert text["rope_parameters"]["mrope_section"] == [6, 5, 5] and text["rope_parameters"]["mrope_interleaved"]
    assert vision["deepstack_visual_indexes"] == [0] and vision["out_hidden_size"] == 64
    model = AutoModelForImageTextToText.from_pretrained(tiny_vl_path)
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration" and model.dtype == torch.float32


def test_placeholder_ids_are_the_qwen3_tokenizers_added_tokens(processor) -> None:
    tokens = ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]
    ids = [
        TINY_VL_CONFIG[key]
        for key in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
    ]
    assert processor.tokenizer.convert_tokens_to_ids(tokens) == ids


def test_template_renders_image_parts_and_tools(processor) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]},
    ]
    tools = [{"type": "function", "function": {"name": "click", "parameters": {"type": "object"}}}]
    text = processor.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert text.endswith(
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What is this?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_expansion_equals_the_processors_input_ids(processor) -> None:
    images = [Image.new("RGB", (256, 256), (10, 200, 10)), Image.new("RGB", (640, 360), (10, 10, 200))]
    messages = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "first"}]},
        {"role": "assistant", "content": "seen"},
        {"role": "user", "content": [{"type": "text", "text": "and"}, {"type": "image"}]},
    ]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    counts = image_token_counts(processor, images)
    assert counts[0] == 64  # 256x256: 16x16 patches of 16 pixels, merged 2x2
    template_ids = processor.tokenizer(text)["input_ids"]
    expanded = expand_image_pads(template_ids, IMAGE_PAD, counts)
    assert expanded == processor(text=[text], images=images)["input_ids"][0]
    assert [length for _, length in image_pad_runs(expanded, IMAGE_PAD)] == counts
    with pytest.raises(PlaceholderMismatch, match="2 image placeholders for 1 images"):
        expand_image_pads(template_ids, IMAGE_PAD, counts[:1])


def test_large_screenshots_are_resized_to_the_cpu_bound(processor) -> None:
    (count,) = image_token_counts(processor, [Image.new("RGB", (1920, 1080))])
    assert count * 32 * 32 <= 320 * 320


def test_decode_data_url_and_raw_base64() -> None:
    data = _png(40, 30)
    decoded = decode_image_url(_data_url(data))
    assert decoded.image.size == (40, 30) and decoded.image.mode == "RGB"
    assert decoded.sha256 == content_address(data) and decoded.data == data
    assert decode_image_url(decoded.data_url).sha256 == decoded.sha256
    assert decode_image_base64(base64.b64encode(data).decode(), "image/png").sha256 == decoded.sha256
    assert content_address(_png(40, 30, (0, 0, 0))) != decoded.sha256


@pytest.mark.parametrize(
    ("payload", "limits", "message"),
    [
        ("https://example.com/cat.png", ImageLimits(), "expected a data URL"),
        ("data:image/png;base64,!!!!", ImageLimits(), "not valid base64"),
        (_data_url(b"not an image at all"), ImageLimits(), "not a readable image"),
        (_data_url(_png(64, 64)[:40]), ImageLimits(), "not a readable image"),
        ("data:text/plain;base64,aGk=", ImageLimits(), "media type 'text/plain'"),
        (_data_url(_png(64, 64)), ImageLimits(max_pixels=1000), "64x64 = 4096 pixels, over the limit of 1000"),
        (_data_url(_png(64, 64)), ImageLimits(max_bytes=50), "over"),
    ],
)
def test_bad_payloads_are_refused_by_name(payload: str, limits: ImageLimits, message: str) -> None:
    with pytest.raises(ImageRejected, match=message):
        decode_image_url(payload, limits)


@pytest.mark.parametrize("size", [(256, 256), (640, 360), (1920, 1080), (17, 900), (20, 20)])
def test_counting_from_the_config_agrees_with_the_processor(processor, tiny_vl_path, size) -> None:
    """The gateway counts placeholders from preprocessor_config.json alone; the processor's grid decides."""
    placeholders = ImagePlaceholders.from_pretrained(tiny_vl_path)
    assert placeholders is not None
    image = Image.new("RGB", size)
    assert placeholders.count(*size) == image_token_counts(processor, [image])[0]
