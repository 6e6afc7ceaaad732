"""The embedded engine serves `tiny-vl` (Qwen3-VL): a prompt with an image, prefilled in one batch
with a text-only prompt, gives the logprobs of transformers' Qwen3VLForConditionalGeneration on the
same checkpoint (vision tower, deepstack, interleaved mrope in prefill and decode); a later call
that resends the image reuses the cached prefix, one with another image at the same placeholder
ids does not; an image that does not fit the prompt is refused naming `image_data[i]`."""

from __future__ import annotations

import asyncio
import base64
import io

import numpy as np
import pytest
import torch
from PIL import Image

from roost.rollout.engine.engine import Engine, EngineConfig
from roost.rollout.engine.tiny_model import tiny_model_dir
from roost.rollout.engine_api.wire import RequestError, SamplingParams
from roost.rollout.vision.placeholders import expand_image_pads, image_token_counts
from roost.rollout.vision.processor import load_processor
from roost.tests.vision_helpers import IMAGE_PAD

SAMPLED = SamplingParams(max_new_tokens=6, temperature=1.0, sampling_seed=7, ignore_eos=True)


@pytest.fixture(scope="module")
def vl_path():
    return tiny_model_dir(variant="tiny-vl")


@pytest.fixture(scope="module")
def processor(vl_path):
    return load_processor(vl_path)


@pytest.fixture(scope="module")
def reference(vl_path):
    from transformers import Qwen3VLForConditionalGeneration

    return Qwen3VLForConditionalGeneration.from_pretrained(vl_path, dtype=torch.float32).eval()


@pytest.fixture
async def engine(vl_path):
    engine = Engine(EngineConfig(vl_path, max_running=4, context_length=512))
    engine.start()
    yield engine
    engine.stop()


def noise_image(seed: int, width: int = 128, height: int = 96) -> tuple[Image.Image, str]:
    """A picture of seeded noise (features that differ from image to image) and its PNG data URL."""
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    image = Image.fromarray(pixels)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return image, "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def chat_ids(processor, messages: list[dict], images: list[Image.Image]) -> list[int]:
    """The template's ids with each image placeholder expanded as the processor does."""
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return expand_image_pads(processor.tokenizer(text)["input_ids"], IMAGE_PAD, image_token_counts(processor, images))


def asked(question: str) -> dict:
    return {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}


def reference_logprobs(reference, processor, prompt: list[int], reply: list[int], images: list[Image.Image]):
    """transformers' logprob of each reply token after `prompt` (one forward over both)."""
    ids = torch.tensor([prompt + reply])
    kwargs: dict = {}
    if images:
        pixels = processor.image_processor(images=images, return_tensors="pt")
        kwargs = {
            "pixel_values": pixels["pixel_values"],
            "image_grid_thw": pixels["image_grid_thw"],
            "mm_token_type_ids": (ids == IMAGE_PAD).int(),
        }
    with torch.no_grad():
        logits = reference(input_ids=ids, **kwargs).logits[0].float()
    every = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return every[torch.arange(len(reply)), torch.tensor(reply)]


async def generate(engine: Engine, prompt: list[int], image_data: list[str] | None = None):
    plan = await engine.prepare(prompt, SAMPLED, None, image_data)
    return await engine.generate(prompt, SAMPLED, plan=plan)


def close(got: list[float], want: torch.Tensor) -> float:
    return (torch.tensor(got) - want).abs().max().item()


async def test_image_and_text_prompts_batched_equal_transformers(engine, processor, reference):
    image, url = noise_image(1)
    with_image = chat_ids(processor, [asked("What is in the picture?")], [image])
    text_only = chat_ids(processor, [{"role": "user", "content": "Name a colour."}], [])
    assert with_image.count(IMAGE_PAD) == 12  # 128x96 pixels: a 6x8 patch grid, merged 2x2
    engine.scheduler.set_paused(True)  # both wait, then go through one prefill together
    replies = [
        asyncio.ensure_future(generate(engine, with_image, [url])),
        asyncio.ensure_future(generate(engine, text_only)),
    ]
    await asyncio.sleep(0.3)
    engine.scheduler.set_paused(False)
    seen, text = await asyncio.gather(*replies)
    assert engine.scheduler.prefill_batches == 1
    assert close(seen.logprobs, reference_logprobs(reference, processor, with_image, seen.output_ids, [image])) <= 1e-4
    assert close(text.logprobs, reference_logprobs(reference, processor, text_only, text.output_ids, [])) <= 1e-4
    # the image matters: another one at the same placeholders gives other logprobs for the same reply
    other, _ = noise_image(2)
    elsewhere = reference_logprobs(reference, processor, with_image, seen.output_ids, [other])
    assert close(seen.logprobs, elsewhere) > 1e-3


async def test_a_resent_image_reuses_the_prefix_and_another_image_does_not(engine, processor, reference):
    image, url = noise_image(3)
    first_messages = [asked("Describe it.")]
    first_prompt = chat_ids(processor, first_messages, [image])
    first = await generate(engine, first_prompt, [url])
    assert first.cached_tokens == 0
    reply = processor.tokenizer.decode(first.output_ids)
    later = [*first_messages, {"role": "assistant", "content": reply}, {"role": "user", "content": "Again."}]
    # the gateway's way: the recorded prompt and reply ids verbatim, then the new turn's ids
    suffix = chat_ids(processor, later, [image])[len(first_prompt) :]
    second_prompt = first_prompt + first.output_ids + suffix[len(first.output_ids) :]
    second = await generate(engine, second_prompt, [url])
    assert second.cached_tokens >= len(first_prompt)
    assert (
        close(second.logprobs, reference_logprobs(reference, processor, second_prompt, second.output_ids, [image]))
        <= 1e-4
    )

    other, other_url = noise_image(4)
    third = await generate(engine, second_prompt, [other_url])
    image_start = second_prompt.index(IMAGE_PAD)
    assert third.cached_tokens <= image_start  # the same ids, another image: shared only up to it
    assert (
        close(third.logprobs, reference_logprobs(reference, processor, second_prompt, third.output_ids, [other]))
        <= 1e-4
    )


async def test_images_that_do_not_fit_the_prompt_are_refused_by_index(engine, processor):
    image, url = noise_image(5)
    prompt = chat_ids(processor, [asked("What?")], [image])
    corrupt = "data:image/png;base64," + base64.b64encode(b"not a png at all").decode()
    with pytest.raises(RequestError, match=r"image_data\[0\]: the data is not a readable image"):
        await engine.prepare(prompt, SAMPLED, None, [corrupt])
    with pytest.raises(RequestError, match=r"1 run\(s\) of image placeholder id 151655 but image_data carries 2"):
        await engine.prepare(prompt, SAMPLED, None, [url, url])
    small, small_url = noise_image(6, 32, 32)
    with pytest.raises(RequestError, match=r"image_data\[0\] is 32x32 pixels, which the model's processor makes 1"):
        await engine.prepare(prompt, SAMPLED, None, [small_url])
    with pytest.raises(RequestError, match="1 run"):
        await engine.prepare(prompt, SAMPLED)  # placeholders without their image
